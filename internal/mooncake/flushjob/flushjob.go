// Package flushjob ships the script that flushes one namespace (a key prefix) from a Mooncake
// store without multi-tenancy. The operator runs it in a Job whose image has the Mooncake Python
// client; the script's header documents its flags, environment variables, output and exit codes.
package flushjob

import _ "embed"

// Script is the Python source of flush.py. It prints one JSON line, {"removed": N, "left": M},
// and exits 0 on success, 1 on failure, 2 on bad usage and 3 when keys of the prefix were left
// and MOONCAKE_FLUSH_REQUIRE_EMPTY was set.
//
//go:embed flush.py
var Script string

// Environment variables the script reads; each has a command-line flag too.
const (
	EnvMaster         = "MOONCAKE_MASTER"
	EnvPrefix         = "MOONCAKE_FLUSH_PREFIX"
	EnvAdminURL       = "MOONCAKE_ADMIN_URL"
	EnvForce          = "MOONCAKE_FLUSH_FORCE"
	EnvRequireEmpty   = "MOONCAKE_FLUSH_REQUIRE_EMPTY"
	EnvTenantID       = "MOONCAKE_TENANT_ID"
	EnvLocalHostname  = "MOONCAKE_LOCAL_HOSTNAME"
	EnvProtocol       = "MOONCAKE_PROTOCOL"
	EnvMetadataServer = "MOONCAKE_TE_META_DATA_SERVER"
	EnvTimeout        = "MOONCAKE_FLUSH_TIMEOUT"
	EnvVerbose        = "MOONCAKE_FLUSH_VERBOSE"
)

// Exit codes of the script.
const (
	ExitOK       = 0
	ExitFailed   = 1
	ExitUsage    = 2
	ExitNotEmpty = 3
)

// Result is the JSON line the script prints on success. Left is nil when no admin URL was given.
type Result struct {
	Removed int64  `json:"removed"`
	Left    *int64 `json:"left"`
}
