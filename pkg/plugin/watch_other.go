//go:build !unix

package plugin

func watchHost(*lifecycle) {}
