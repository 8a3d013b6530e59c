package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
)

// freePort is a TCP port free on the loopback address now, for a script's
// idemgen ui.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port), nil
}

// cmdHTTP requests a page of a server started in the background, waiting
// up to 30 s for it to listen, and checks the status:
//
//	http STATUS get URL       the body goes to stdout
//	http STATUS post URL FORM (FORM url-encoded)
//
// $NAME in its arguments is expanded, quoted or not.
func cmdHTTP(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 3 || args[1] == "post" && len(args) != 4 || args[1] == "get" && len(args) != 3 {
		ts.Fatalf("usage: http STATUS get URL | http STATUS post URL FORM")
	}
	// Quoted arguments (a query's &) are not expanded by the script.
	for i := range args {
		args[i] = os.Expand(args[i], ts.Getenv)
	}
	want, err := strconv.Atoi(args[0])
	ts.Check(err)
	client := &http.Client{Timeout: 30 * time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var resp *http.Response
		if args[1] == "get" {
			resp, err = client.Get(args[2])
		} else {
			form, perr := url.ParseQuery(args[3])
			ts.Check(perr)
			resp, err = client.PostForm(args[2], form)
		}
		if err != nil {
			if time.Now().Before(deadline) && strings.Contains(err.Error(), "connection refused") {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			ts.Fatalf("%s %s: %v", args[1], args[2], err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		ts.Check(err)
		fmt.Fprint(ts.Stdout(), string(body))
		if resp.StatusCode != want {
			ts.Fatalf("%s %s: status %d, want %d", args[1], args[2], resp.StatusCode, want)
		}
		return
	}
}
