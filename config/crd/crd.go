// Package crd embeds the generated CustomResourceDefinitions of the hicache.io API (bases/), so
// that the kubectl plugin defaults and validates a file with the very schema, defaults and CEL
// rules the API server serves. make generate writes bases/ from the markers in api/; make verify
// fails when they drift.
package crd

import "embed"

// Bases holds bases/*.yaml, one CustomResourceDefinition per file.
//
//go:embed bases/*.yaml
var Bases embed.FS
