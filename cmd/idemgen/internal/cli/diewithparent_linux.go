package cli

import (
	"os/exec"
	"syscall"
)

// diesWithParent has Linux send the child SIGTERM when idemgen ends
// however it ends, SIGKILL included, so that no database child (an
// `idemgen ui` serving on its port) outlives it. The child ends on SIGTERM
// as on an interrupt.
func diesWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
