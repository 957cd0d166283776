package webarea

import (
	"crypto/subtle"
	"net/http"

	"go.uber.org/zap"
)

// MaxFormBytes bounds the body of a web area's form.
const MaxFormBytes = 16 << 10

// ReadForm reads a POST form of at most MaxFormBytes after the cross-origin check. When
// either fails it answers the request with refuse (the area's error page), logs a post from
// another site, and returns false.
func ReadForm(w http.ResponseWriter, r *http.Request, origin *http.CrossOriginProtection, log *zap.Logger,
	refuse func(status int, title, msg string)) bool {
	if err := origin.Check(r); err != nil {
		log.Info("refused a cross-origin form post", zap.String("path", r.URL.Path), zap.String("origin", r.Header.Get("Origin")))
		refuse(http.StatusForbidden, "Request refused",
			"This form was sent from another site. Go back to the page, reload it and try again.")
		return false
	}
	r.Body = http.MaxBytesReader(w, r.Body, MaxFormBytes)
	if err := r.ParseForm(); err != nil {
		refuse(http.StatusBadRequest, "Bad request", "The form could not be read.")
		return false
	}
	return true
}

// TokensEqual compares a form's token with the one it must match, in constant time; an empty
// token matches nothing.
func TokensEqual(got, want string) bool {
	return got != "" && want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}
