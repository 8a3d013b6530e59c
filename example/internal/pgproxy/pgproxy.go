// Package pgproxy is a small TCP proxy on loopback between PostgreSQL
// clients and a server, for tests that cut connections under a running
// fleet: all of them at once, one at random, or one right after it
// forwarded a COMMIT to the server and before it relays the answer (the
// client never learns whether its transaction committed).
//
// It reads the frontend stream (client to server) message by message to
// spot COMMIT: after the untyped startup message, every message is a type
// byte, an int32 length that counts itself, and a body. A COMMIT comes as a
// simple Query ('Q', the SQL text NUL-terminated), which is how pgx sends
// Tx.Commit (no arguments: the simple protocol), or as a Parse ('P', a
// statement name then the SQL text). A client that asks for TLS
// (SSLRequest) is passed through unparsed: use sslmode=disable. The backend
// stream (server to client) is copied as bytes.
package pgproxy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards connections accepted on a loopback port to a server.
type Proxy struct {
	ln     net.Listener
	target string

	mu          sync.Mutex
	rng         *rand.Rand
	links       map[*link]struct{}
	down        bool // new connections are closed at once: the server looks gone
	commitCuts  int  // COMMITs still to cut after forwarding
	stats       Stats
	wg          sync.WaitGroup
	closed      bool
	commitGrace time.Duration
}

// Stats counts what the proxy did.
type Stats struct {
	Accepted   int // connections accepted
	Refused    int // connections closed at once while down
	Cut        int // connections cut on purpose (a client or server closing is not counted)
	CommitCuts int // of those, cut after forwarding a COMMIT, before its answer
}

// link is one client connection and its server connection.
type link struct {
	client, server net.Conn
	quiet          atomic.Bool // relay nothing more to the client
	once           sync.Once
}

func (l *link) cut() {
	l.quiet.Store(true)
	l.once.Do(func() {
		_ = l.client.Close()
		_ = l.server.Close()
	})
}

// Start listens on a free loopback port and forwards to target
// (host:port); seed drives which connection a random cut picks.
func Start(target string, seed uint64) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("pgproxy: listen: %w", err)
	}
	p := &Proxy{ln: ln, target: target, rng: rand.New(rand.NewPCG(seed, 1)), links: map[*link]struct{}{}, commitGrace: 20 * time.Millisecond}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Stats returns the counts so far.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Live is the number of connections open through the proxy.
func (p *Proxy) Live() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// SetDown makes the server look gone (down true: every open connection is
// cut and new ones are closed at once) or back (down false).
func (p *Proxy) SetDown(down bool) {
	p.mu.Lock()
	p.down = down
	p.mu.Unlock()
	if down {
		p.CutAll()
	}
}

// CutAll cuts every open connection and returns how many.
func (p *Proxy) CutAll() int {
	p.mu.Lock()
	ls := make([]*link, 0, len(p.links))
	for l := range p.links {
		ls = append(ls, l)
	}
	p.mu.Unlock()
	for _, l := range ls {
		p.cut(l, false)
	}
	return len(ls)
}

// CutRandom cuts one open connection picked at random; false when none is open.
func (p *Proxy) CutRandom() bool {
	p.mu.Lock()
	if len(p.links) == 0 {
		p.mu.Unlock()
		return false
	}
	ls := make([]*link, 0, len(p.links))
	for l := range p.links {
		ls = append(ls, l)
	}
	// Map order is random but not seeded: pick by the seeded rng from a
	// stable order (by the client's port).
	sortLinks(ls)
	l := ls[p.rng.IntN(len(ls))]
	p.mu.Unlock()
	p.cut(l, false)
	return true
}

// CutNextCommit arms the proxy: the next COMMIT any client sends is
// forwarded to the server, then that connection is cut before the
// server's answer reaches the client.
func (p *Proxy) CutNextCommit() {
	p.mu.Lock()
	p.commitCuts++
	p.mu.Unlock()
}

// Close stops accepting, cuts every connection and waits for the proxy's
// goroutines (bounded: they end when their sockets close).
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	p.CutAll()
	p.wg.Wait()
}

// cut closes l on purpose, and counts it.
func (p *Proxy) cut(l *link, afterCommit bool) {
	p.mu.Lock()
	if _, ok := p.links[l]; ok {
		delete(p.links, l)
		p.stats.Cut++
		if afterCommit {
			p.stats.CommitCuts++
		}
	}
	p.mu.Unlock()
	l.cut()
}

// drop closes l once one of its sides closed: not a cut.
func (p *Proxy) drop(l *link) {
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
	l.cut()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down || p.closed {
			p.stats.Refused++
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.mu.Unlock()
		s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		l := &link{client: c, server: s}
		p.mu.Lock()
		// Down or closed while the server was dialed: CutAll did not see
		// this link, so it must not go live (CI: a run that had lost its
		// database saved its watermark on a session accepted just then).
		if p.closed || p.down {
			if p.down {
				p.stats.Refused++
			}
			p.mu.Unlock()
			l.cut()
			continue
		}
		p.links[l] = struct{}{}
		p.stats.Accepted++
		p.mu.Unlock()
		p.wg.Add(2)
		go p.frontend(l)
		go p.backend(l)
	}
}

// backend copies the server's bytes to the client until either side
// closes. Once the link is quiet it reads and drops them: an answer the
// client must not see, read so that the server's socket closes with a FIN
// rather than a reset.
func (p *Proxy) backend(l *link) {
	defer p.wg.Done()
	defer p.drop(l)
	buf := make([]byte, 32<<10)
	for {
		n, err := l.server.Read(buf)
		if n > 0 && !l.quiet.Load() {
			if _, werr := l.client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// frontend forwards the client's messages one by one, cutting the link
// after a COMMIT when armed.
func (p *Proxy) frontend(l *link) {
	defer p.wg.Done()
	defer p.drop(l)
	r := bufio.NewReaderSize(l.client, 32<<10)
	// Untyped messages first: SSLRequest/GSSENCRequest, then StartupMessage.
	msg, err := readUntyped(r)
	if err != nil {
		return
	}
	if _, err := l.server.Write(msg); err != nil {
		return
	}
	if code := binary.BigEndian.Uint32(msg[4:8]); code == sslRequest || code == gssEncRequest {
		// Encryption asked for: what follows cannot be read, so it is
		// passed through unparsed (no COMMIT cuts on this link).
		_, _ = io.Copy(l.server, r)
		return
	}
	for {
		msg, err := readTyped(r)
		if err != nil {
			return
		}
		commit := isCommit(msg)
		if _, err := l.server.Write(msg); err != nil {
			return
		}
		if commit && p.takeCommitCut() {
			// The server has the COMMIT; the client will not hear back.
			// The answer takes a round trip and a WAL flush; the proxy
			// goes quiet microseconds after the write.
			l.quiet.Store(true)
			time.Sleep(p.commitGrace) // let the server read and run it before the socket closes
			p.cut(l, true)
			return
		}
	}
}

func (p *Proxy) takeCommitCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.commitCuts == 0 {
		return false
	}
	p.commitCuts--
	return true
}

const (
	sslRequest    = 80877103
	gssEncRequest = 80877104
	maxMessage    = 64 << 20
)

func readUntyped(r *bufio.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n < 8 || n > maxMessage {
		return nil, errors.New("pgproxy: bad startup message length")
	}
	msg := make([]byte, n)
	copy(msg, hdr[:])
	_, err := io.ReadFull(r, msg[4:])
	return msg, err
}

func readTyped(r *bufio.Reader) ([]byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n < 4 || n > maxMessage {
		return nil, errors.New("pgproxy: bad message length")
	}
	msg := make([]byte, 1+n)
	copy(msg, hdr[:])
	_, err := io.ReadFull(r, msg[5:])
	return msg, err
}

// isCommit reports whether a frontend message is a Query or a Parse of
// COMMIT (or END, its synonym).
func isCommit(msg []byte) bool {
	body := msg[5:]
	switch msg[0] {
	case 'Q':
	case 'P':
		i := bytes.IndexByte(body, 0) // the statement's name
		if i < 0 {
			return false
		}
		body = body[i+1:]
	default:
		return false
	}
	if i := bytes.IndexByte(body, 0); i >= 0 {
		body = body[:i]
	}
	sql := bytes.ToLower(bytes.TrimSpace(bytes.TrimRight(bytes.TrimSpace(body), ";")))
	return bytes.Equal(sql, []byte("commit")) || bytes.Equal(sql, []byte("end")) || bytes.Equal(sql, []byte("commit transaction")) || bytes.Equal(sql, []byte("commit work"))
}

func sortLinks(ls []*link) {
	port := func(l *link) int {
		if a, ok := l.client.RemoteAddr().(*net.TCPAddr); ok {
			return a.Port
		}
		return 0
	}
	for i := 1; i < len(ls); i++ {
		for j := i; j > 0 && port(ls[j]) < port(ls[j-1]); j-- {
			ls[j], ls[j-1] = ls[j-1], ls[j]
		}
	}
}
