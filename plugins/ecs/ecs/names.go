package ecs

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// ECS limits the names below must fit.
const (
	// RunTask startedBy: [A-Za-z0-9-_/]. The reference now allows 128
	// characters and said 36 before. The plugin keeps to 36, so its names
	// fit both and stay the ones every earlier version derived: a resume
	// finds tasks by deriving the name again.
	maxStartedByLen   = 36
	maxClientTokenLen = 64 // RunTask clientToken: at most 64 characters, valid 24 h
	// MaxTaskCount keeps "tether-" + hash + "-" + index within maxStartedByLen.
	MaxTaskCount = 1000
)

// startedByHashLen is how many base32 characters of the job ID's hash go into
// startedBy: 24 × 5 = 120 bits, leaving room for a four-digit task index.
const startedByHashLen = 24

var lowerBase32 = base32.StdEncoding.WithPadding(base32.NoPadding)

// StartedBy is the ECS startedBy of a job's task index: "tether-", 24
// lowercase base32 characters of SHA-256(job ID), "-", the index. A job ID
// (a UUID) does not fit the 36 characters ECS allows, so it is hashed. The
// same job and index always give the same name, which is how Resume and
// Cleanup find tasks without a handle.
func StartedBy(jobID string, index int) string {
	return jobStem(jobID) + "-" + strconv.Itoa(index)
}

// jobStem is startedBy without the task index.
func jobStem(jobID string) string {
	sum := sha256.Sum256([]byte(jobID))
	return "tether-" + strings.ToLower(lowerBase32.EncodeToString(sum[:]))[:startedByHashLen]
}

// ClientToken is the RunTask clientToken of one launch. The same job run
// (job ID and job attempt), task index and launch attempt always give the
// same token, so a RunTask repeated after a lost answer or by a resuming
// agent returns the task the first call started instead of starting another.
// A new launch, a retry of the whole job, or a new try of a launch that
// RunTask refused without launching anything (try > 0) gets a new token.
func ClientToken(jobID string, jobAttempt, index, launch, try int) string {
	in := fmt.Sprintf("%s\x00%d\x00%d\x00%d", jobID, jobAttempt, index, launch)
	if try > 0 {
		in += fmt.Sprintf("\x00%d", try) // try 0 keeps the tokens plugin 0.1 derived
	}
	sum := sha256.Sum256([]byte(in))
	return "tether-" + hex.EncodeToString(sum[:])[:48]
}

// taskID is the last segment of a task ARN, which awslogs uses in stream names.
func taskID(arn string) string { return arn[strings.LastIndexByte(arn, '/')+1:] }
