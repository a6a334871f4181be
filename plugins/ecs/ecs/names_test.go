package ecs

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStartedByFitsECS(t *testing.T) {
	jobs := []string{"", "j1", "0b7a2c4e-8f1d-4c3a-9e55-2f6f2d1a7b90", string(make([]byte, 500))}
	for _, job := range jobs {
		for _, i := range []int{0, 1, 9, 10, 99, 999, MaxTaskCount - 1, 9999} {
			s := StartedBy(job, i)
			require.LessOrEqual(t, len(s), maxStartedByLen, s)
			require.True(t, validStartedBy(s), "startedBy %q must be [A-Za-z0-9-_/]", s)
			require.Equal(t, s, StartedBy(job, i), "deterministic")
		}
	}
}

func TestStartedByDistinct(t *testing.T) {
	seen := map[string]string{}
	for j := range 200 {
		job := fmt.Sprintf("0b7a2c4e-8f1d-4c3a-9e55-%012d", j)
		for i := range 5 {
			s := StartedBy(job, i)
			key := fmt.Sprintf("%s/%d", job, i)
			require.NotContains(t, seen, s, "%s collides with %s", key, seen[s])
			seen[s] = key
		}
	}
	require.Regexp(t, `^tether-[a-z2-7]{24}-3$`, StartedBy("job", 3))
}

func TestClientToken(t *testing.T) {
	base := ClientToken("job-1", 1, 0, 1, 0)
	require.LessOrEqual(t, len(base), maxClientTokenLen)
	require.Equal(t, base, ClientToken("job-1", 1, 0, 1, 0), "deterministic")
	for _, other := range []string{
		ClientToken("job-2", 1, 0, 1, 0), // another job
		ClientToken("job-1", 2, 0, 1, 0), // a retry of the job
		ClientToken("job-1", 1, 1, 1, 0), // another task index
		ClientToken("job-1", 1, 0, 2, 0), // another launch attempt
		ClientToken("job-1", 1, 0, 1, 1), // another try of a launch RunTask refused
	} {
		require.NotEqual(t, base, other)
		require.LessOrEqual(t, len(other), maxClientTokenLen)
	}
	require.Regexp(t, `^[A-Za-z0-9-]+$`, base)
}

// validStartedBy reports whether s is a startedBy ECS accepts (RunTask:
// up to 36 letters, numbers, hyphens, underscores and slashes).
func validStartedBy(s string) bool {
	return regexp.MustCompile(`^[A-Za-z0-9_/-]{1,` + strconv.Itoa(maxStartedByLen) + `}$`).MatchString(s)
}

func TestValidStartedBy(t *testing.T) {
	require.True(t, validStartedBy("a-b_c/D9"))
	require.False(t, validStartedBy(""))
	require.False(t, validStartedBy("has space"))
	require.False(t, validStartedBy("x.y"))
	require.False(t, validStartedBy(string(make([]byte, 37))))
}

func TestTaskID(t *testing.T) {
	require.Equal(t, "abc123", taskID("arn:aws:ecs:us-east-1:000000000000:task/default/abc123"))
	require.Equal(t, "abc123", taskID("abc123"))
}
