// Package reconcile is the skeleton every kind reconciles with: a scope, phases that return a
// step, one status patch per reconcile, the read-your-writes record of status writes, server-side
// apply under one field owner, and the retry limiter.
package reconcile
