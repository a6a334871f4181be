package api

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
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

// textLimit is the most bytes a text field of a request may hold.
type textLimit struct {
	field, value string
	max          int
}

// tooLong refuses the first field longer than its limit.
func tooLong(limits ...textLimit) *inputError {
	for _, l := range limits {
		if len(l.value) > l.max {
			return &inputError{l.field, fmt.Sprintf("%s is longer than %d bytes", l.field, l.max)}
		}
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
	mant, exp, _ := strings.Cut(strings.ToLower(s), "e")
	e, err := strconv.ParseInt(strings.TrimPrefix(cmp.Or(exp, "0"), "+"), 10, 64)
	if err != nil || e > maxNumericScale || e < -maxNumericScale {
		// Zero mantissas pass the float check with any exponent.
		// PostgreSQL refuses some (0e2147483648).
		return fmt.Sprintf("has an exponent beyond ±%d", maxNumericScale)
	}
	_, frac, _ := strings.Cut(mant, ".")
	if int64(len(frac))-e > maxNumericScale {
		return fmt.Sprintf("has more than %d digits after the decimal point", maxNumericScale)
	}
	return ""
}

// checkRawString reports what is wrong with the raw JSON text of a string
// token (quotes, escapes, and maybe the separators before it), or "". The
// decoder accepted the token, so every escape in it is complete.
func checkRawString(raw []byte) string {
	if !utf8.Valid(raw) {
		return "is not valid UTF-8"
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		i++ // the escaped character: n, ", \, u …
		if raw[i] != 'u' {
			continue
		}
		r := hex4(raw[i+1:])
		switch {
		case r == 0:
			return "contains a NUL character (\\u0000)"
		case utf16.IsSurrogate(r) && r >= 0xdc00:
			return "contains a lone surrogate escape (\\udc00-\\udfff without a high surrogate before it)"
		case utf16.IsSurrogate(r): // a high one, valid only before a low one
			if !bytes.HasPrefix(raw[i+5:], []byte(`\u`)) || utf16.DecodeRune(r, hex4(raw[i+7:])) == unicode.ReplacementChar {
				return "contains a lone surrogate escape (\\ud800-\\udbff without a low surrogate after it)"
			}
			i += 6 // the pair's second half
		}
		i += 4
	}
	return ""
}

// hex4 reads the four hex digits of a \u escape the decoder accepted.
func hex4(b []byte) rune {
	n, _ := strconv.ParseUint(string(b[:4]), 16, 16) // well-formed: the decoder checked
	return rune(n)
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
	const send = "; send UTF-8 text without NUL or lone surrogates"
	switch v := tok.(type) {
	case string:
		if why := checkRawString(raw); why != "" {
			return &inputError{path, fmt.Sprintf("%s %s%s", cmp.Or(path, "request body"), why, send)}
		}
	case json.Number:
		// Only context is stored as jsonb. Decoding checks the other
		// numbers. The top-level key is the path up to its first . or [.
		if top := path[:strings.IndexAny(path+".", ".[")]; top != "context" {
			return nil
		}
		if why := checkNumber(v.String()); why != "" {
			return &inputError{path, fmt.Sprintf("%s: the number %.40s %s", path, v.String(), why)}
		}
	case json.Delim: // '{' or '[': the decoder refuses a closing one here
		for i := 0; w.dec.More(); i++ {
			var elem string
			if v == '[' {
				elem = fmt.Sprintf("%s[%d]", path, i)
			} else {
				key, raw, err := w.token()
				if err != nil {
					return err
				}
				if why := checkRawString(raw); why != "" {
					return &inputError{path, fmt.Sprintf("an object key in %s %s%s", cmp.Or(path, "the request body"), why, send)}
				}
				name, _ := key.(string)
				elem = join(path, name)
			}
			if err := w.value(elem); err != nil {
				return err
			}
		}
		_, _, err := w.token() // the closing delimiter
		return err
	}
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
