// Package deploy holds the checks of the deploy kit in this directory: the
// IAM policies under iam/ against the AWS operations the code calls, and the
// image `make image` builds, unpacked and run.
package deploy
