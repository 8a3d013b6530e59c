// idemgen's lean sqlc child: this file replaces sqlc v1.31.1's
// internal/rpc/errors.go (and interceptor.go is left out), so the
// compiler's one reference to remote analysis does not link gRPC.

package rpc

import "errors"

var ErrUnauthenticated = errors.New("rpc authentication failed")
