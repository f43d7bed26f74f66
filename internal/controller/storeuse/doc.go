// Package storeuse answers who uses which part of which store (store IDs, users, writers, the
// field indexes they are looked up by), holds the flush-request contract between the kinds, the
// admin interface of stores, the managed etcd proxy that several kinds add to their pods, and the
// options every controller is configured with.
package storeuse
