// Package testsupport holds the test helpers that the tests of several controller packages
// share. Only _test files import it.
package testsupport
