package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Text stored or compared by PostgreSQL must be valid UTF-8 without NUL:
// text columns refuse both, and jsonb also refuses the escapes \u0000 and
// lone surrogates (\ud800). encoding/json would silently replace invalid
// UTF-8 and lone surrogates with U+FFFD, so the raw body is checked before
// it is decoded.

// inputError is a refused piece of input. Field names it as the API error's
// field.
type inputError struct {
	Field string
	Msg   string
}

func (e *inputError) Error() string { return e.Msg }

// checkText reports what makes s unfit for a PostgreSQL text value, or "".
func checkText(s string) string {
	switch {
	case !utf8.ValidString(s):
		return "is not valid UTF-8"
	case strings.IndexByte(s, 0) >= 0:
		return "contains a NUL character"
	}
	return ""
}

// textField checks one decoded text value named field.
func textField(field, s string) *inputError {
	if why := checkText(s); why != "" {
		return &inputError{field, fmt.Sprintf("%s %s; send UTF-8 text without NUL", field, why)}
	}
	return nil
}

// checkQuery checks every query parameter's name and values.
func checkQuery(q url.Values) *inputError {
	for name, values := range q {
		if why := checkText(name); why != "" {
			return &inputError{"", fmt.Sprintf("a query parameter name %s; send UTF-8 text without NUL", why)}
		}
		for _, v := range values {
			if err := textField(name, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// parseJobID returns the canonical form of a job ID, or false when raw is
// not a UUID (no job has such an ID).
func parseJobID(raw string) (string, bool) {
	// uuid.Parse also takes braces, urn:uuid: and 32 bare hex digits. The
	// canonical form is what the jobs table holds.
	id, err := uuid.Parse(raw)
	if err != nil {
		return "", false
	}
	return id.String(), true
}

// Numeric bounds of context numbers. Plugins decode context as float64, and
// PostgreSQL's numeric keeps at most 16383 digits after the decimal point.
// Exponents are held to the same bound.
const maxNumericScale = 16383

// checkNumber reports what makes the JSON number text s unfit for the job's
// context, or "".
func checkNumber(s string) string {
	if _, err := strconv.ParseFloat(s, 64); err != nil {
		return "is out of range: numbers must fit a 64-bit float (at most about 1.8e308)"
	}
	mant, exp := s, int64(0)
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant = s[:i]
		e, err := strconv.ParseInt(strings.TrimPrefix(s[i+1:], "+"), 10, 64)
		if err != nil || e > maxNumericScale || e < -maxNumericScale {
			// Zero mantissas pass the float check with any exponent.
			// PostgreSQL refuses some (0e2147483648).
			return fmt.Sprintf("has an exponent beyond ±%d", maxNumericScale)
		}
		exp = e
	}
	frac := int64(0)
	if _, f, ok := strings.Cut(mant, "."); ok {
		frac = int64(len(f))
	}
	if frac-exp > maxNumericScale {
		return fmt.Sprintf("has more than %d digits after the decimal point", maxNumericScale)
	}
	return ""
}

// checkRawString reports what is wrong with the raw JSON text of a string
// token (quotes, escapes, and maybe the separators before it), or "".
func checkRawString(raw []byte) string {
	if !utf8.Valid(raw) {
		return "is not valid UTF-8"
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' || i+1 >= len(raw) {
			continue
		}
		if raw[i+1] != 'u' {
			i++ // \n, \", \\ …
			continue
		}
		r, ok := hex4(raw[i+2:])
		if !ok {
			return "" // malformed: the decoder reports it
		}
		switch {
		case r == 0:
			return "contains a NUL character (\\u0000)"
		case r >= 0xdc00 && r <= 0xdfff:
			return "contains a lone surrogate escape (\\udc00-\\udfff without a high surrogate before it)"
		case r >= 0xd800 && r <= 0xdbff:
			next, ok := rune(0), false
			if i+7 < len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' {
				next, ok = hex4(raw[i+8:])
			}
			if !ok || next < 0xdc00 || next > 0xdfff {
				return "contains a lone surrogate escape (\\ud800-\\udbff without a low surrogate after it)"
			}
			i += 6 // the pair's second half
		}
		i += 5
	}
	return ""
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[:4]), 16, 16)
	return rune(n), err == nil
}

// checkBody walks the JSON value in body and refuses the first string (object
// keys included) PostgreSQL would refuse, and the first number under context
// (stored as jsonb) out of range. Field is the value's path: "reason",
// "context.env.HOME", "context.list[2]". Malformed JSON is not reported
// here. Decoding the body reports it with a better message.
func checkBody(body []byte) *inputError {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	w := walker{dec: dec, body: body}
	err := w.value("")
	var ie *inputError
	if errors.As(err, &ie) {
		return ie
	}
	return nil
}

type walker struct {
	dec  *json.Decoder
	body []byte
}

// errSyntax stops the walk at malformed JSON.
var errSyntax = errors.New("malformed JSON")

// token returns the next token and its raw text.
func (w *walker) token() (json.Token, []byte, error) {
	start := w.dec.InputOffset()
	tok, err := w.dec.Token()
	if err != nil {
		return nil, nil, errSyntax // EOF included: the body decode reports it
	}
	return tok, w.body[start:w.dec.InputOffset()], nil
}

func (w *walker) value(path string) error {
	tok, raw, err := w.token()
	if err != nil {
		return err
	}
	return w.rest(path, tok, raw)
}

func (w *walker) rest(path string, tok json.Token, raw []byte) error {
	switch v := tok.(type) {
	case string:
		if why := checkRawString(raw); why != "" {
			return &inputError{path, fmt.Sprintf("%s %s; send UTF-8 text without NUL or lone surrogates", fieldName(path), why)}
		}
	case json.Number:
		if path == "context" || strings.HasPrefix(path, "context.") || strings.HasPrefix(path, "context[") {
			if why := checkNumber(v.String()); why != "" {
				return &inputError{path, fmt.Sprintf("%s: the number %.40s %s", path, v.String(), why)}
			}
		}
	case json.Delim:
		switch v {
		case '{':
			for w.dec.More() {
				key, raw, err := w.token()
				if err != nil {
					return err
				}
				name, _ := key.(string)
				if why := checkRawString(raw); why != "" {
					where := "the request body"
					if path != "" {
						where = path
					}
					return &inputError{path, fmt.Sprintf("an object key in %s %s; send UTF-8 text without NUL or lone surrogates", where, why)}
				}
				if err := w.value(join(path, name)); err != nil {
					return err
				}
			}
		case '[':
			for i := 0; w.dec.More(); i++ {
				if err := w.value(fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
		}
		if v == '{' || v == '[' {
			if _, _, err := w.token(); err != nil { // the closing delimiter
				return err
			}
		}
	}
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func fieldName(path string) string {
	if path == "" {
		return "request body"
	}
	return path
}
