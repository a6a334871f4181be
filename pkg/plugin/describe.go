package plugin

import "strings"

// MaxResources bounds one description. The SDK sends at most this many of
// what Describe returns (the first ones), and the host keeps at most this
// many, so a job of a thousand tasks does not grow its timeline by a
// thousand rows of a thousand entries. Put the most useful resources first.
const MaxResources = 100

// capResources returns at most MaxResources of rs.
func capResources(rs []Resource) []Resource {
	if len(rs) > MaxResources {
		return rs[:MaxResources]
	}
	return rs
}

// ShellQuote quotes s as one word for a POSIX shell, for Resource.Command.
// A person pastes the command, and names in it (a log group, a namespace)
// may come from a job's context. Words of only safe characters are left
// as they are.
func ShellQuote(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("@%+=:,./_-", c)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
