// idemgen's lean sqlc child: this file replaces sqlc v1.31.1's
// internal/cmd/cmd.go and generate.go when idemgen builds its sqlc child
// (their other files but options.go, process.go and shim.go are left out).
// It runs only `generate -f FILE` with sqlc's own Go code generator, as
// sqlc's generate command does, and `version`; not plugins, remote
// generation, vet or the other commands, whose imports are most of sqlc's
// build.

package cmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/sqlc-dev/sqlc/internal/codegen/golang"
	"github.com/sqlc-dev/sqlc/internal/compiler"
	"github.com/sqlc-dev/sqlc/internal/config"
	"github.com/sqlc-dev/sqlc/internal/debug"
	"github.com/sqlc-dev/sqlc/internal/info"
	"github.com/sqlc-dev/sqlc/internal/multierr"
	"github.com/sqlc-dev/sqlc/internal/opts"
)

// Do runs `generate -f FILE` (or `--file FILE`, `-f=FILE`) and `version`.
func Do(args []string, stdin io.Reader, stdout io.Writer, stderr io.Writer) int {
	if len(args) == 1 && args[0] == "version" {
		fmt.Fprintln(stdout, info.Version)
		return 0
	}
	file, err := generateFile(args)
	if err != nil {
		fmt.Fprintf(stderr, "idemgen's sqlc child: %v\n", err)
		return 2
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		fmt.Fprintf(stderr, "error parsing config: absolute file path lookup failed: %s\n", err)
		return 1
	}
	output, err := Generate(context.Background(), filepath.Dir(abs), filepath.Base(abs), &Options{
		Env:    Env{Debug: opts.DebugFromEnv(), Experiment: opts.ExperimentFromEnv()},
		Stderr: stderr,
	})
	if err != nil {
		return 1
	}
	for filename, source := range output {
		os.MkdirAll(filepath.Dir(filename), 0755)
		if err := os.WriteFile(filename, []byte(source), 0644); err != nil {
			fmt.Fprintf(stderr, "%s: %s\n", filename, err)
			return 1
		}
	}
	return 0
}

func generateFile(args []string) (string, error) {
	if len(args) == 0 || args[0] != "generate" {
		return "", errors.New("runs only `generate -f FILE` and `version`")
	}
	var file string
	for i := 1; i < len(args); i++ {
		switch a := args[i]; {
		case (a == "-f" || a == "--file") && i+1 < len(args):
			file = args[i+1]
			i++
		case strings.HasPrefix(a, "-f="), strings.HasPrefix(a, "--file="):
			file = a[strings.Index(a, "=")+1:]
		default:
			return "", fmt.Errorf("unexpected argument %q: runs only `generate -f FILE`", a)
		}
	}
	if file == "" {
		return "", errors.New("generate needs -f FILE")
	}
	return file, nil
}

type Env struct {
	DryRun     bool
	Debug      opts.Debug
	Experiment opts.Experiment
	Remote     bool
	NoRemote   bool
}

func (e *Env) Validate(cfg *config.Config) error {
	if len(cfg.Plugins) > 0 {
		return errors.New("idemgen's sqlc child runs no plugins")
	}
	return nil
}

func printFileErr(stderr io.Writer, dir string, fileErr *multierr.FileError) {
	filename, err := filepath.Rel(dir, fileErr.Filename)
	if err != nil {
		filename = fileErr.Filename
	}
	fmt.Fprintf(stderr, "%s:%d:%d: %s\n", filename, fileErr.Line, fileErr.Column, fileErr.Err)
}

func readConfig(stderr io.Writer, dir, filename string) (string, *config.Config, error) {
	configPath := filepath.Join(dir, filename)
	base := filepath.Base(configPath)
	file, err := os.Open(configPath)
	if err != nil {
		fmt.Fprintf(stderr, "error parsing %s: file does not exist\n", base)
		return "", nil, err
	}
	defer file.Close()
	conf, err := config.ParseConfig(file)
	if err != nil {
		fmt.Fprintf(stderr, "error parsing %s: %s\n", base, err)
		return "", nil, err
	}
	return configPath, &conf, nil
}

func Generate(ctx context.Context, dir, filename string, o *Options) (map[string]string, error) {
	e := o.Env
	stderr := o.Stderr
	configPath, conf, err := o.ReadConfig(dir, filename)
	if err != nil {
		return nil, err
	}
	base := filepath.Base(configPath)
	if err := config.Validate(conf); err != nil {
		fmt.Fprintf(stderr, "error validating %s: %s\n", base, err)
		return nil, err
	}
	if err := e.Validate(conf); err != nil {
		fmt.Fprintf(stderr, "error validating %s: %s\n", base, err)
		return nil, err
	}
	g := &generator{dir: dir, output: map[string]string{}}
	if err := processQuerySets(ctx, g, conf, dir, o); err != nil {
		return nil, err
	}
	return g.output, nil
}

type generator struct {
	m      sync.Mutex
	dir    string
	output map[string]string
}

func (g *generator) Pairs(ctx context.Context, conf *config.Config) []OutputPair {
	var pairs []OutputPair
	for _, sql := range conf.SQL {
		if sql.Gen.Go != nil {
			pairs = append(pairs, OutputPair{SQL: sql, Gen: config.SQLGen{Go: sql.Gen.Go}})
		}
	}
	return pairs
}

func (g *generator) ProcessResult(ctx context.Context, combo config.CombinedSettings, sql OutputPair, result *compiler.Result) error {
	req := codeGenRequest(result, combo)
	var err error
	if req.PluginOptions, err = jsonOf(sql.Gen.Go); err != nil {
		return err
	}
	if combo.Global.Overrides.Go != nil {
		if req.GlobalOptions, err = jsonOf(combo.Global.Overrides.Go); err != nil {
			return err
		}
	}
	resp, err := golang.Generate(ctx, req)
	if err != nil {
		return err
	}
	g.m.Lock()
	defer g.m.Unlock()
	absout := filepath.Join(g.dir, combo.Go.Out)
	for _, file := range resp.Files {
		filename := filepath.Join(g.dir, combo.Go.Out, file.Name)
		if strings.Contains(filename, "..") || !strings.HasPrefix(filename, absout) {
			return fmt.Errorf("invalid file output path: %s", filename)
		}
		g.output[filename] = string(file.Contents)
	}
	return nil
}

func parse(ctx context.Context, name, dir string, sql config.SQL, combo config.CombinedSettings, parserOpts opts.Parser, stderr io.Writer) (*compiler.Result, bool) {
	c, err := compiler.NewCompiler(sql, combo, parserOpts)
	defer func() {
		if c != nil {
			c.Close(ctx)
		}
	}()
	if err != nil {
		fmt.Fprintf(stderr, "error creating compiler: %s\n", err)
		return nil, true
	}
	if err := c.ParseCatalog(sql.Schema); err != nil {
		fmt.Fprintf(stderr, "# package %s\n", name)
		if parserErr, ok := err.(*multierr.Error); ok {
			for _, fileErr := range parserErr.Errs() {
				printFileErr(stderr, dir, fileErr)
			}
		} else {
			fmt.Fprintf(stderr, "error parsing schema: %s\n", err)
		}
		return nil, true
	}
	if parserOpts.Debug.DumpCatalog {
		debug.Dump(c.Catalog())
	}
	if err := c.ParseQueries(sql.Queries, parserOpts); err != nil {
		fmt.Fprintf(stderr, "# package %s\n", name)
		if parserErr, ok := err.(*multierr.Error); ok {
			for _, fileErr := range parserErr.Errs() {
				printFileErr(stderr, dir, fileErr)
			}
		} else {
			fmt.Fprintf(stderr, "error parsing queries: %s\n", err)
		}
		return nil, true
	}
	return c.Result(), false
}

func jsonOf(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("opts marshal failed: %w", err)
	}
	return b, nil
}
