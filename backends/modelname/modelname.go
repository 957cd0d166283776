// Package modelname gives every spelling of an Ollama model name one key, as Ollama resolves
// names. The backend uses it to check which models a host has, and the test fault server to
// answer for a model however it is spelled.
package modelname

import (
	"strings"

	"github.com/ollama/ollama/types/model"
)

// Normalize gives every spelling of one model the same key: "llama3", "Llama3:latest",
// "library/llama3" and "registry.ollama.ai/library/llama3:latest" are all the same model. A name
// Ollama would not parse is only trimmed and lower-cased.
func Normalize(name string) string {
	name = strings.TrimSpace(name)
	if n := model.ParseName(name); n.IsValid() {
		return strings.ToLower(n.String())
	}
	return strings.ToLower(name)
}
