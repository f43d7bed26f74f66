// Package cachebackend reconciles CacheBackends: the master, the store pods (planned by
// planStores), the managed etcd of HA masters, their NetworkPolicies, and the probes of the
// masters' admin API.
package cachebackend
