// Package clienttest holds the tests of pkg/client that need the real
// server: the API handler on a real PostgreSQL. pkg/client is a module of
// its own, which cannot import the agent's internal packages.
package clienttest
