package catalog

// SampleText returns the fixed text streamed to requests made with a test key (test keys never
// call the model: docs/API.md, "Live and test keys"), split into pieces so clients see
// streaming. It is deterministic and clearly marked; tool and lang are the request's validated
// values.
func SampleText(tool, lang string) []string {
	return []string{
		"[caddy-textgen test mode: sample output for tool " + tool + " in language " + lang + ", no model was called]\n",
		"This is a fixed sample text. ",
		"Requests made with a test key (tg_test_...) draw on the test balance ",
		"and never call the model, ",
		"so the same request always returns these same pieces.\n",
		"Use a live key (tg_live_...) to get generated text.\n",
	}
}
