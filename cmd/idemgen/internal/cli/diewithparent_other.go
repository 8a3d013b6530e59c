//go:build !linux

package cli

import "os/exec"

// diesWithParent does nothing where the system has no parent-death
// signal: the child is stopped when idemgen is interrupted or terminated.
func diesWithParent(*exec.Cmd) {}
