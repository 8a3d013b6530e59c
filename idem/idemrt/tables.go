package idemrt

import (
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/idemgen/idemgen/idem/names"
)

// Tables names a generated package's bookkeeping tables: its spec's tables
// key, or <package>_idem_<table>. The runtime's ledger queries are written
// over LedgerPlaceholders; a store runs them on a package's own tables.
type Tables = names.Tables

// LedgerPlaceholders are the table names the runtime's ledger queries are
// written with (idempg and idemsqlite compile them with sqlc against a
// schema of these names).
var LedgerPlaceholders = names.LedgerPlaceholders

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// TableNames rewrites the runtime's ledger queries for one package's
// tables. Each statement is rewritten once and kept: the queries are a
// fixed set, so the cache never grows past it.
type TableNames struct {
	replace *strings.Replacer
	err     error
	cache   sync.Map // placeholder SQL -> the package's SQL
}

// NewTableNames checks that every name in t is a plain SQL identifier;
// when one is not, every query run through it fails with that error.
func NewTableNames(t Tables) *TableNames {
	n := &TableNames{}
	from := []string{LedgerPlaceholders.Ledger, LedgerPlaceholders.Progress, LedgerPlaceholders.Seen, LedgerPlaceholders.Parked, LedgerPlaceholders.Limits}
	to := []string{t.Ledger, t.Progress, t.Seen, t.Parked, t.Limits}
	var pairs []string
	for i, name := range to {
		if name == "" && from[i] == LedgerPlaceholders.Limits {
			continue // a package generated before the limits table: its effects have no limits
		}
		if !identifier.MatchString(name) {
			n.err = fmt.Errorf("idem: the %s table's name %q is not a SQL identifier", strings.TrimPrefix(from[i], "idem_"), name)
			return n
		}
		pairs = append(pairs, from[i], name)
	}
	n.replace = strings.NewReplacer(pairs...)
	return n
}

// SQL returns query over the package's tables, or the error NewTableNames found.
func (n *TableNames) SQL(query string) (string, error) {
	if n.err != nil {
		return "", n.err
	}
	if q, ok := n.cache.Load(query); ok {
		return q.(string), nil
	}
	q := n.replace.Replace(query)
	n.cache.Store(query, q)
	return q, nil
}
