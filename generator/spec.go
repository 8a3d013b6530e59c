package generator

import (
	"github.com/idemgen/idemgen/generator/internal/model"
	"github.com/idemgen/idemgen/generator/internal/spec"
)

// Spec is one parsed spec file (idemgen.yaml): every value keeps the
// position it came from, so that a diagnostic can point at it.
type Spec = spec.File

// Diagnostic is one finding about a spec, printed in go-build form
// (file:line:col: message). Its zero Severity is an error.
type Diagnostic = spec.Diagnostic

// Diagnostics is a list of findings. As an error (from Generate, from
// Resolve) it holds errors only.
type Diagnostics = spec.Diagnostics

// ParseSpec reads the spec in data and checks it: every mistake, errors
// and warnings, in the order found (Diagnostics.Sorted puts them in file
// order). name is the file name the diagnostics carry. The checks run on
// whatever the parser could read, so one call reports every finding; a
// spec with errors must not be generated.
func ParseSpec(name string, data []byte) (*Spec, Diagnostics) {
	f, ds := spec.Parse(name, data)
	return f, append(ds, spec.Check(f)...)
}

// Package is a checked spec resolved to the package it generates: its
// jobs, their units and effects with every default applied, and its
// tables. The operator commands (status, ledger, ui) read a database by
// it.
type Package = model.Package

// Resolve resolves a spec that ParseSpec found no errors in.
func Resolve(s *Spec) (*Package, error) { return model.Resolve(s) }
