package plugin

import "strings"

// MaxResources bounds one description. The SDK sends at most this many of
// what Describe returns (the first ones), and the host keeps at most this
// many, so a job of a thousand tasks does not grow its timeline by a
// thousand rows of a thousand entries. Put the most useful resources first.
const MaxResources = 100

// capResources returns at most MaxResources of rs.
func capResources(rs []Resource) []Resource { return rs[:min(len(rs), MaxResources)] }

// shellSafe are the characters a shell word may hold unquoted.
const shellSafe = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%+=:,./_-"

// ShellQuote quotes s as one word for a POSIX shell, for Resource.Command.
// A person pastes the command, and names in it (a log group, a namespace)
// may come from a job's context. Words of only safe characters are left
// as they are.
func ShellQuote(s string) string {
	if s == "" {
		return "''"
	}
	if strings.Trim(s, shellSafe) == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
