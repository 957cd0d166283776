package catalog

// Tones are the allowed values of the request's optional "tone" field.
var Tones = []string{"formal", "friendly", "direct", "professional"}

// toneSentences are appended to the system prompt for the request's tone.
var toneSentences = map[string]string{
	"formal": "Tone: formal. Use a formal register and the polite form of address of the output " +
		"language (for example Sie in German, vous in French), complete sentences, no slang, no emojis.",
	"friendly": "Tone: friendly. Be warm and approachable, with a natural, conversational style and " +
		"the informal form of address where it is usual in the output language and setting, while staying respectful.",
	"direct": "Tone: direct. Be brief and to the point: lead with the main message, use short sentences, " +
		"and leave out filler and pleasantries beyond what politeness requires.",
	"professional": "Tone: professional. Be clear, competent and courteous: businesslike without being stiff, " +
		"with the form of address usual in business correspondence in the output language.",
}

// noToneSentence is used when the request has no tone.
const noToneSentence = "Tone: use the tone that fits the tool and the input."

// IsTone reports whether tone is one of Tones.
func IsTone(tone string) bool {
	_, ok := toneSentences[tone]
	return ok
}

// ToneInstruction returns the sentence appended to the system prompt for tone; for "" or an
// unknown tone it returns the instruction to use the tone that fits the tool.
func ToneInstruction(tone string) string {
	if s, ok := toneSentences[tone]; ok {
		return s
	}
	return noToneSentence
}
