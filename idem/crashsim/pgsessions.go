package crashsim

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"
)

// A crashed incarnation's server sessions, handed on as a pooler hands
// them on. When a process dies, the server sees its sockets close: each
// session's open transaction aborts and its locks drop. A connection
// pooler in front of the server (PgBouncer in session mode) keeps a
// server session its client left idle between statements: it rolls back
// what the client left open, resets the session (server_reset_query,
// DISCARD ALL) and gives it to the next client. What every other session
// sees is the same: the transaction aborted and its locks gone before
// the kill returns.
//
// The simulation does as such a pooler does. Each client socket of an
// incarnation is a simSocket, which follows the wire protocol's messages
// both ways. At a kill, a session that owes its client nothing (every
// query or Sync answered by a ready-for-query, no message half sent or half
// read) is taken from the dead client: its transaction rolled back, its
// session reset (prepared statements too: its next client starts with an
// empty statement cache) and renamed out of the incarnations' names, then
// kept in its schema's bin. A session in the middle of a statement is
// closed and killed as before. The next incarnation's pool, opening a
// session, is answered from the bin: its startup message gets the kept
// session's startup reply, and the session is renamed after it.
//
// A new session costs the server a fork and its caches (41 ms of CPU on
// a two-core virtual machine, pgbench -C), and a crash scenario's next
// incarnation opens its sessions anew: seven in ten of a matrix's sessions
// were a crash's.

// pgProtocol3 begins a startup message of protocol 3.0; a client's first
// message that begins otherwise asks for TLS or GSS, or cancels a query.
const pgProtocol3 = 196608

// pgFrames splits one direction of a PostgreSQL connection into its
// messages as bytes pass, keeping the bodies of the message types keep
// names.
type pgFrames struct {
	untyped bool // the next message has no type byte (a client's first)
	hdr     [5]byte
	hdrN    int
	inBody  bool
	left    int
	typ     byte
	keep    func(typ byte) bool
	body    []byte
	// msg is called with each whole message: its body when kept, else nil.
	msg func(typ byte, body []byte)
}

func (f *pgFrames) hdrLen() int {
	if f.untyped {
		return 4
	}
	return 5
}

// feed passes p through the splitter.
func (f *pgFrames) feed(p []byte) {
	for len(p) > 0 {
		if !f.inBody {
			n := copy(f.hdr[f.hdrN:f.hdrLen()], p)
			f.hdrN += n
			p = p[n:]
			if f.hdrN < f.hdrLen() {
				return
			}
			length := int(binary.BigEndian.Uint32(f.hdr[f.hdrLen()-4 : f.hdrLen()]))
			f.typ = 0
			if !f.untyped {
				f.typ = f.hdr[0]
			}
			f.inBody, f.left, f.body = true, max(length-4, 0), f.body[:0]
		}
		n := min(len(p), f.left)
		if f.keep != nil && f.keep(f.typ) {
			f.body = append(f.body, p[:n]...)
		}
		f.left -= n
		p = p[n:]
		if f.left == 0 {
			var body []byte
			if f.keep != nil && f.keep(f.typ) {
				body = f.body
			}
			f.inBody, f.hdrN = false, 0
			f.untyped = false
			f.msg(f.typ, body)
		}
	}
}

// partial reports whether a message is half through.
func (f *pgFrames) partial() bool { return f.inBody || f.hdrN > 0 }

// simSessionBin is a schema's sessions taken from dead incarnations,
// ready for the next one's pool.
type simSessionBin struct {
	schema *simSchema
	// name is the application_name binned sessions carry: outside the
	// incarnations' (incarnationApps), so no kill or scenario end finds them.
	name string
	// usable is false while the pool's sessions must open slowly
	// (family_pool.go's slow-open): they are opened anew then.
	usable func() bool
}

// simBinned is a session in the bin: its socket and the startup reply a
// new client of it gets.
type simBinned struct {
	raw      net.Conn
	startup  []byte // authentication-ok, the parameter-status and backend-key-data messages, ready-for-query
	rollback bool   // the dead client left a transaction open
}

// simBinTimeout bounds a binned session's round trips (its reset, its
// renaming); one that runs out is closed and killed instead.
const simBinTimeout = 5 * time.Second

// put resets b's session for the bin and keeps it, within the schema's
// bound on idle sessions (shared with the pools given back); false (the
// caller closes it) when the bin is full or the reset failed.
func (bin *simSessionBin) put(b *simBinned) bool {
	if !bin.schema.roomForIdle() {
		return false
	}
	reset := "DEALLOCATE ALL; " + simSessionReset + quoteLiteral(bin.name)
	if b.rollback {
		reset = "ROLLBACK; " + reset
	}
	if status, err := simpleQuery(b.raw, reset); err != nil || status != 'I' {
		return false
	}
	return bin.schema.keepBinned(b)
}

// take hands a binned session to a new client, named app; nil when the
// bin is empty.
func (bin *simSessionBin) take(app string) *simBinned {
	for {
		b := bin.schema.takeBinned()
		if b == nil {
			return nil
		}
		if status, err := simpleQuery(b.raw, "SET application_name = "+quoteLiteral(app)); err == nil && status == 'I' {
			return b
		}
		b.close()
	}
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// simpleQuery runs sql on a session no client holds, as a simple query,
// and returns the transaction status its ready-for-query reports.
func simpleQuery(raw net.Conn, sql string) (byte, error) {
	_ = raw.SetDeadline(time.Now().Add(simBinTimeout))
	defer raw.SetDeadline(time.Time{})
	var msg bytes.Buffer
	writeMessage(&msg, 'Q', append([]byte(sql), 0))
	if _, err := raw.Write(msg.Bytes()); err != nil {
		return 0, err
	}
	var failed error
	hdr := make([]byte, 5)
	for {
		if _, err := io.ReadFull(raw, hdr); err != nil {
			return 0, err
		}
		body := make([]byte, max(int(binary.BigEndian.Uint32(hdr[1:]))-4, 0))
		if _, err := io.ReadFull(raw, body); err != nil {
			return 0, err
		}
		switch hdr[0] {
		case 'E':
			failed = fmt.Errorf("crashsim: %q failed: %q", sql, body)
		case 'Z':
			if len(body) != 1 {
				return 0, errors.New("crashsim: a ready-for-query without its status")
			}
			return body[0], failed
		}
	}
}

func (b *simBinned) close() {
	_ = b.raw.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = b.raw.Write([]byte{'X', 0, 0, 0, 4})
	_ = b.raw.Close()
}

// simSessions are the client sockets of one incarnation (of whichever
// holds their pool now).
type simSessions struct {
	mu    sync.Mutex
	conns []*simSocket
	dead  bool
	bin   *simSessionBin // nil: no session is binned or taken from the bin
}

func (inc *simSessions) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	inc.mu.Lock()
	defer inc.mu.Unlock()
	if inc.dead {
		return nil, errProcessGone
	}
	bin := inc.bin
	if bin != nil && !bin.usable() {
		bin = nil
	}
	c := &simSocket{bin: bin, chosen: make(chan struct{}), dialRaw: func() (net.Conn, error) {
		return (&net.Dialer{KeepAlive: 5 * time.Minute}).DialContext(ctx, network, addr)
	}}
	if bin == nil {
		raw, err := c.dialRaw()
		if err != nil {
			return nil, err
		}
		c.attach(raw)
		c.choose()
	}
	inc.conns = append(inc.conns, c)
	return c, nil
}

// kill ends the incarnation's client side: each socket is taken from it
// (its reads and writes fail from now on, as a closed socket's do) and
// its server session binned or closed. It returns once each binned
// session's transaction is rolled back; the caller kills what is left.
func (inc *simSessions) kill() {
	inc.mu.Lock()
	inc.dead = true
	conns := inc.conns
	inc.conns = nil
	inc.mu.Unlock()
	for _, c := range conns {
		raw, kept := c.takeOver()
		if raw == nil {
			continue
		}
		if kept == nil || !c.bin.put(kept) {
			_ = raw.Close()
		}
	}
}

// simSocket is an incarnation's client socket to the server: the server's
// own, or, when its pool opened it with a bin, a binned session of the
// schema (chosen at the client's startup message), else a new one.
type simSocket struct {
	bin     *simSessionBin
	dialRaw func() (net.Conn, error)

	// chosen is closed once the client's first message chose raw (or the
	// socket was taken or closed before): pgconn reads in the background
	// while it writes, its startup message too.
	chosen chan struct{}
	once   sync.Once
	mu     sync.Mutex
	raw    net.Conn // nil until the startup message chose it
	dead   bool     // taken from the client
	io     int      // reads and writes under way
	unread []byte   // a binned session's startup reply, not yet read by the client
	// What the socket has carried: the client's queries and Syncs, the
	// server's ready-for-query (the last one's transaction status), and the
	// messages in between.
	out, in       pgFrames
	trackable     bool // a plain session: no TLS or GSS, no cancel request
	closing       bool // the client sent Terminate
	cycles, ready int
	status        byte
	// reply is the session's startup reply for its next client: the
	// server's (authentication-ok, then its parameter-status and
	// backend-key-data messages, then ready-for-query), or the bin's.
	reply bytes.Buffer
	// The client's deadlines, set on the server socket once it is chosen.
	readBy, writeBy time.Time
}

// choose marks the server side chosen (or never to be).
func (c *simSocket) choose() { c.once.Do(func() { close(c.chosen) }) }

func (c *simSocket) Close() error {
	defer c.choose()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dead = true
	if c.raw == nil {
		return nil
	}
	return c.raw.Close()
}

func (c *simSocket) LocalAddr() net.Addr  { return c.addr(net.Conn.LocalAddr) }
func (c *simSocket) RemoteAddr() net.Addr { return c.addr(net.Conn.RemoteAddr) }

func (c *simSocket) addr(of func(net.Conn) net.Addr) net.Addr {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.raw == nil {
		return &net.TCPAddr{}
	}
	return of(c.raw)
}

func (c *simSocket) SetDeadline(t time.Time) error { return c.setDeadlines(&t, &t) }
func (c *simSocket) SetReadDeadline(t time.Time) error {
	return c.setDeadlines(&t, nil)
}
func (c *simSocket) SetWriteDeadline(t time.Time) error {
	return c.setDeadlines(nil, &t)
}

func (c *simSocket) setDeadlines(read, write *time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return nil // the socket is no longer the client's
	}
	if read != nil {
		c.readBy = *read
	}
	if write != nil {
		c.writeBy = *write
	}
	if c.raw == nil {
		return nil
	}
	if err := c.raw.SetReadDeadline(c.readBy); err != nil {
		return err
	}
	return c.raw.SetWriteDeadline(c.writeBy)
}

// use makes raw the socket's server side, under the client's deadlines.
// The caller holds c.mu.
func (c *simSocket) use(raw net.Conn) {
	c.raw = raw
	_ = raw.SetReadDeadline(c.readBy)
	_ = raw.SetWriteDeadline(c.writeBy)
}

// attach makes raw the socket's server side, followed from the client's
// first message on.
func (c *simSocket) attach(raw net.Conn) {
	c.use(raw)
	c.trackable = true
	writeMessage(&c.reply, 'R', []byte{0, 0, 0, 0}) // authentication-ok
	c.out = pgFrames{untyped: true, keep: func(typ byte) bool { return typ == 0 }, msg: c.sent}
	c.in = pgFrames{keep: func(typ byte) bool { return typ == 'Z' || (c.ready == 0 && (typ == 'S' || typ == 'K')) }, msg: c.received}
}

// sent follows a client message.
func (c *simSocket) sent(typ byte, body []byte) {
	switch typ {
	case 0:
		if len(body) < 4 || binary.BigEndian.Uint32(body) != pgProtocol3 {
			c.trackable = false // TLS or GSS from here on, or a cancel request
			return
		}
		c.cycles++
	case 'Q', 'S':
		c.cycles++
	case 'X':
		c.closing = true
	}
}

// received follows a server message.
func (c *simSocket) received(typ byte, body []byte) {
	switch {
	case typ == 'Z' && len(body) == 1:
		if c.ready == 0 {
			writeMessage(&c.reply, 'Z', []byte{'I'})
		}
		c.ready++
		c.status = body[0]
	case c.ready == 0 && typ == 'S':
		writeMessage(&c.reply, 'S', body)
	case c.ready == 0 && typ == 'K':
		writeMessage(&c.reply, 'K', body)
	}
}

func writeMessage(b *bytes.Buffer, typ byte, body []byte) {
	b.WriteByte(typ)
	_ = binary.Write(b, binary.BigEndian, uint32(len(body)+4))
	b.Write(body)
}

// idle reports whether the session owes its client nothing: every query
// and Sync answered, no message half through either way.
func (c *simSocket) idle() bool {
	return c.trackable && !c.closing && c.ready > 0 && c.cycles == c.ready && !c.out.partial() && !c.in.partial()
}

func (c *simSocket) enter() (net.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return nil, net.ErrClosed
	}
	c.io++
	return c.raw, nil
}

func (c *simSocket) leave() {
	c.mu.Lock()
	c.io--
	c.mu.Unlock()
}

func (c *simSocket) Write(p []byte) (int, error) {
	raw, err := c.enter()
	if err != nil {
		return 0, err
	}
	defer c.leave()
	if raw == nil {
		return c.start(p)
	}
	n, err := raw.Write(p)
	c.follow(&c.out, p[:n])
	return n, err
}

// follow passes p, which went one way through a plain session, to that
// way's splitter.
func (c *simSocket) follow(way *pgFrames, p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.trackable {
		way.feed(p)
	}
}

// start takes the client's first message: a startup message is answered
// by a binned session where the bin has one; anything else (a cancel
// request, TLS) goes to a new socket.
func (c *simSocket) start(p []byte) (int, error) {
	if app, ok := startupApp(p); ok {
		if b := c.bin.take(app); b != nil {
			defer c.choose()
			c.mu.Lock()
			c.use(b.raw)
			c.unread = b.startup
			c.reply.Write(b.startup)
			c.trackable, c.cycles, c.ready, c.status = true, 1, 1, 'I'
			c.out = pgFrames{msg: c.sent}
			c.in = pgFrames{keep: func(typ byte) bool { return typ == 'Z' }, msg: c.received}
			c.mu.Unlock()
			return len(p), nil
		}
	}
	defer c.choose()
	raw, err := c.dialRaw()
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	c.attach(raw)
	c.mu.Unlock()
	n, err := raw.Write(p)
	c.follow(&c.out, p[:n])
	return n, err
}

// startupApp reads a whole protocol 3 startup message's application_name.
func startupApp(p []byte) (string, bool) {
	if len(p) < 8 || int(binary.BigEndian.Uint32(p)) != len(p) || binary.BigEndian.Uint32(p[4:]) != pgProtocol3 {
		return "", false
	}
	fields := bytes.Split(p[8:], []byte{0})
	for i := 0; i+1 < len(fields); i += 2 {
		if string(fields[i]) == "application_name" {
			return string(fields[i+1]), true
		}
	}
	return "", false
}

func (c *simSocket) Read(p []byte) (int, error) {
	select {
	case <-c.chosen:
	case <-time.After(simBinTimeout + time.Minute): // a start bounded by its dial and simBinTimeout
		return 0, errors.New("crashsim: a read before the startup message chose the session")
	}
	raw, err := c.enter()
	if err != nil {
		return 0, err
	}
	defer c.leave()
	c.mu.Lock()
	if len(c.unread) > 0 {
		n := copy(p, c.unread)
		c.unread = c.unread[n:]
		c.mu.Unlock()
		return n, nil
	}
	c.mu.Unlock()
	if raw == nil {
		return 0, net.ErrClosed // the start failed
	}
	n, err := raw.Read(p)
	c.follow(&c.in, p[:n])
	return n, err
}

// takeOver takes the socket from its client: the client's reads and
// writes under way end (their deadlines passed) and later ones fail. It
// returns the server socket (nil: none was chosen), now the caller's
// alone, and, when the session owes the client nothing, the session for
// the bin.
func (c *simSocket) takeOver() (net.Conn, *simBinned) {
	c.mu.Lock()
	c.dead = true
	c.mu.Unlock()
	defer c.choose()
	// A start under way may be choosing its socket: its round trip with
	// the bin is bounded by simBinTimeout.
	bound := time.Now().Add(simBinTimeout + time.Second)
	for {
		c.mu.Lock()
		raw, busy := c.raw, c.io > 0
		if !busy || time.Now().After(bound) {
			c.raw = nil // a Close by the dead client closes nothing of the caller's
			defer c.mu.Unlock()
			if raw == nil {
				return nil, nil
			}
			_ = raw.SetDeadline(time.Time{})
			if busy || c.bin == nil || !c.idle() || len(c.unread) > 0 {
				return raw, nil
			}
			return raw, &simBinned{raw: raw, startup: bytes.Clone(c.reply.Bytes()), rollback: c.status != 'I'}
		}
		c.mu.Unlock()
		if raw != nil {
			_ = raw.SetDeadline(time.Now()) // the client's read or write ends
		}
		time.Sleep(time.Millisecond)
	}
}
