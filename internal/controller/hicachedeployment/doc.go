// Package hicachedeployment reconciles HiCacheDeployments: the rank groups (planned by
// planGroups), their pods' command lines, the router, the keys, the stale namespaces a new layout
// leaves behind and the flushes it asks for, and the status.
package hicachedeployment
