package childbin

import (
	"os/exec"
	"syscall"
)

// diesWithParent has Linux send the child SIGTERM when idemgen ends
// however it ends, SIGKILL included.
func diesWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
