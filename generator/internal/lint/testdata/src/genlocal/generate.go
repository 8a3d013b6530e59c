// This file is the user's: it sits beside the generated files, in the
// same package, and is checked like any other.

package genlocal

import "context"

//go:generate go tool idemgen generate

type indexer struct{}

func (indexer) Index(ctx context.Context, key string, t Tag) error { // want `\(indexer\).Index, which implements Index, never uses its idempotency key`
	return nil
}

// post takes the key and drops it, so this one drops it too.
var _ Index = IndexFunc(func(ctx context.Context, key string, t Tag) error { return post(key) }) // want `the function given to IndexFunc never uses its idempotency key`

func post(string) error { return nil }
