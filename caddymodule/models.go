package caddymodule

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/caddy-textgen/textgen/caddymodule/catalog"
)

// OpenAI's models (GET /api/v1/models, GET /api/v1/models/{id}): the tools an API key may call,
// each as a model that POST /api/v1/chat/completions answers with (chat.go).

const modelsPath = "/api/v1/models"

// doorOf is the door whose shape r's answers take where the generation has not begun: OpenAI's
// for its paths, else POST /api/v1/generate's.
func doorOf(r *http.Request) door {
	p := r.URL.Path
	if p == modelsPath || strings.HasPrefix(p, modelsPath+"/") || strings.HasPrefix(p, "/api/v1/chat/") {
		return chatDoor{}
	}
	return generateDoor{}
}

type modelDoc struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

type modelList struct {
	Object string     `json:"object"`
	Data   []modelDoc `json:"data"`
}

// serveModels answers GET /api/v1/models and GET /api/v1/models/{id} for the key of the request:
// the tools it may call (its allowed_tools), in the catalog's order; another tool is not found.
func (h *Handler) serveModels(w http.ResponseWriter, r *http.Request, reqID string, store handlerLedger) {
	d := chatDoor{}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		d.writeError(w, reqID, errMethodNotAllowedGET, -1)
		return
	}
	kc, e := h.checkKey(store, w, r, reqID, true)
	if e != nil {
		d.writeError(w, reqID, e, kc.available)
		return
	}
	owner := h.app.AccountArea(h.ledgerRef.Key()).SiteName
	if owner == "" {
		owner = "textgen"
	}
	model := func(slug string) modelDoc {
		return modelDoc{ID: slug, Object: "model", Created: h.provisioned.Unix(), OwnedBy: owner}
	}
	w.Header().Set("X-Credits-Used", "0")
	w.Header().Set("X-Credits-Remaining", strconv.FormatInt(kc.available, 10))
	if id, one := strings.CutPrefix(r.URL.Path, modelsPath+"/"); one {
		rt, ok := h.tools[id]
		if !ok {
			d.writeError(w, reqID, newError(http.StatusNotFound, "model_not_found", "model",
				"the model "+strconv.Quote(truncate(id, 64))+" does not exist: the models are this API's tools (GET /api/v1/models lists those this key may call)"), kc.available)
			return
		}
		if e := keyLimits(kc.key.KeyLimits, rt, r); e != nil {
			d.writeError(w, reqID, e, kc.available) // as a chat completion of it is refused
			return
		}
		writeJSON(w, r, reqID, http.StatusOK, model(id))
		return
	}
	list := modelList{Object: "list", Data: []modelDoc{}}
	for _, slug := range catalog.Default().Slugs() {
		if _, ok := h.tools[slug]; ok && kc.key.KeyLimits.AllowsTool(slug) {
			list.Data = append(list.Data, model(slug))
		}
	}
	writeJSON(w, r, reqID, http.StatusOK, list)
}
