// Package cacheflush reconciles CacheFlushes: the claim, the attempts (planned by planFlush),
// the confirmation of a removal on masters with HA, and the Jobs or local runs that remove a
// namespace.
package cacheflush
