//go:build !linux

package childbin

import "os/exec"

// diesWithParent does nothing where the system has no parent-death
// signal: the child is stopped when idemgen's context is cancelled.
func diesWithParent(*exec.Cmd) {}
