// Package docs holds idemgen's reference, in Markdown: the spec format
// (spec.md), what the generated code guarantees (guarantees.md), how to
// operate it (operations.md) and the runtime API (runtime.md).
//
// It has no Go API. Its test keeps the pages true: every key of the JSON
// Schema is documented, every full spec shown passes vet and generates,
// and every link and repository path the pages (and the Go comments
// that cite them) name exists.
package docs
