package main

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"slices"
	"strings"
	"testing"
)

// depSrc is a package the fixtures import, to show how another
// package's types are written (qualified by its name).
const depSrc = `package dep

type T struct{ X int }

type Reader interface{ Read(p []byte) (int, error) }

type Number interface{ ~int | ~float64 }
`

// fixturePath is each fixture package's import path.
const fixturePath = "example.com/p"

// typecheck type-checks src as the package path, importing the standard
// library from export data and the packages of deps by their paths.
func typecheck(t *testing.T, path, src string, deps ...*types.Package) *types.Package {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path+".go", src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	conf := types.Config{Importer: fixtureImporter{deps, importer.Default()}}
	pkg, err := conf.Check(path, fset, []*ast.File{f}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return pkg
}

// A fixtureImporter imports its packages by path, and every other
// through std.
type fixtureImporter struct {
	pkgs []*types.Package
	std  types.Importer
}

func (i fixtureImporter) Import(path string) (*types.Package, error) {
	for _, p := range i.pkgs {
		if p.Path() == path {
			return p, nil
		}
	}
	return i.std.Import(path)
}

// TestFeatures specifies the lines written for each kind of declaration:
// for each fixture package, the complete, sorted list of its features
// (without the "pkg example.com/p, " that starts every line).
func TestFeatures(t *testing.T) {
	t.Parallel()
	dep := typecheck(t, "example.com/dep", depSrc)
	tests := []struct {
		name string
		src  string
		want []string
	}{{
		name: "funcs: parameter names dropped, variadic, results",
		src: `package p
import ("context"; "time")
func Open(name string) (*File, error) { return nil, nil }
func Printf(format string, args ...any) {}
func Wait(ctx context.Context, d time.Duration) bool { return false }
func Apply(f func(int) (string, error)) {}
func Bytes(b []byte, r rune) {}
func hidden() {}
type File struct{}`,
		want: []string{
			"func Apply(func(int) (string, error))",
			"func Bytes([]uint8, int32)",
			"func Open(string) (*File, error)",
			"func Printf(string, ...interface{})",
			"func Wait(context.Context, time.Duration) bool",
			"type File struct",
		},
	}, {
		name: "methods: value and pointer receivers, promoted ones, unexported left out",
		src: `package p
type Duration int64
func (d Duration) String() string { return "" }
func (d *Duration) Set(s string) error { return nil }
func (d Duration) round() {}
type Timer struct{ Duration }
type hidden struct{}
func (hidden) Visible() {}`,
		want: []string{
			"method (*Duration) Set(string) error",
			"method (*Timer) Set(string) error",
			"method (Duration) String() string",
			"method (Timer) String() string",
			"type Duration int64",
			"type Timer struct",
			"type Timer struct, embedded Duration",
		},
	}, {
		name: "types: defined, func, composite, aliases unaliased",
		src: `package p
import "example.com/dep"
type Outcome int
type Func func(job *Job) error
type Index map[string][]*Job
type Pipe chan<- [4]byte
type Ticks <-chan int
type Nested chan (<-chan int)
type Job struct{}
type DepAlias = dep.T
type Any = any
type Point struct{ X, Y int }
type Ptr *Point
type Renamed Point`,
		want: []string{
			"type Any = interface{}",
			"type DepAlias = dep.T",
			"type Func func(*Job) error",
			"type Index map[string][]*Job",
			"type Job struct",
			"type Nested chan (<-chan int)",
			"type Outcome int",
			"type Pipe chan<- [4]uint8",
			"type Point struct",
			"type Point struct, X int",
			"type Point struct, Y int",
			"type Ptr *Point",
			"type Renamed struct",
			"type Renamed struct, X int",
			"type Renamed struct, Y int",
			"type Ticks <-chan int",
		},
	}, {
		name: "generics: type parameters by position, constraints written out",
		src: `package p
import "example.com/dep"
func Map[T, U any](s []T, f func(T) U) []U { return nil }
func Index[S ~[]E, E comparable](s S, v E) int { return 0 }
func Sum[N dep.Number](ns ...N) N { var z N; return z }
type Pair[K comparable, V any] struct { Key K; Value V }
func (p Pair[A, B]) Get() (A, B) { return p.Key, p.Value }
func (p *Pair[K, V]) Set(v V) {}
func NewPair[V any](k string, v V) Pair[string, V] { return Pair[string, V]{k, v} }
type Number interface{ ~int64 | ~float64; String() string }
type Ordered interface{ comparable; dep.Number }
type List[T any] []T`,
		want: []string{
			"func Index[$0 interface{ ~[]$1 }, $1 comparable]($0, $1) int",
			"func Map[$0 interface{}, $1 interface{}]([]$0, func($0) $1) []$1",
			"func NewPair[$0 interface{}](string, $0) Pair[string, $0]",
			"func Sum[$0 dep.Number](...$0) $0",
			"method (*Pair[$0, $1]) Set($1)",
			"method (Pair[$0, $1]) Get() ($0, $1)",
			"type List[$0 interface{}] []$0",
			"type Number interface { String, ~int64|~float64 }",
			"type Number interface, String() string",
			"type Ordered interface { comparable, ~int|~float64 }",
			"type Pair[$0 comparable, $1 interface{}] struct",
			"type Pair[$0 comparable, $1 interface{}] struct, Key $0",
			"type Pair[$0 comparable, $1 interface{}] struct, Value $1",
		},
	}, {
		name: "consts: type, then value; untyped ones ideal",
		src: `package p
import "time"
type Outcome int
const (
	OutcomeDone Outcome = iota
	OutcomeParked
	outcomeHidden
)
const Retries = 3
const Name = "shareq"
const Timeout = 30 * time.Second
const Third = 1.0 / 3
const Letter = 'x'
const Yes = true`,
		want: []string{
			`const Letter = 120`,
			`const Letter ideal-char`,
			`const Name = "shareq"`,
			`const Name ideal-string`,
			`const OutcomeDone = 0`,
			`const OutcomeDone Outcome`,
			`const OutcomeParked = 1`,
			`const OutcomeParked Outcome`,
			`const Retries = 3`,
			`const Retries ideal-int`,
			`const Third = 0.333333  // 1/3`,
			`const Third ideal-float`,
			`const Timeout = 30000000000`,
			`const Timeout time.Duration`,
			`const Yes = true`,
			`const Yes ideal-bool`,
			`type Outcome int`,
		},
	}, {
		name: "vars",
		src: `package p
import ("errors"; "time"; "example.com/dep")
var ErrClosed = errors.New("p: closed")
var Default, other = 5 * time.Second, 1
var Deps []*dep.T
var Hook func(string) bool`,
		want: []string{
			"var Default time.Duration",
			"var Deps []*dep.T",
			"var ErrClosed error",
			"var Hook func(string) bool",
		},
	}, {
		name: "struct fields: exported ones, embedded, promoted from unexported embedded, literals in full",
		src: `package p
import ("io"; "example.com/dep")
type Config struct {
	Name    string
	limit   int
	Labels  map[string]string
	Inline  struct{ A int ` + "`json:\"a\"`" + `; b string }
	*dep.T
	io.Reader
	base
}
type base struct{ Shared bool; Name int; hidden int; *deeper }
type deeper struct{ Deep string }`,
		want: []string{
			"method (Config) Read([]uint8) (int, error)",
			"type Config struct",
			"type Config struct, Deep string",
			`type Config struct, Inline struct{ A int "json:\"a\""; b string }`,
			"type Config struct, Labels map[string]string",
			"type Config struct, Name string",
			"type Config struct, Shared bool",
			"type Config struct, embedded *dep.T",
			"type Config struct, embedded io.Reader",
		},
	}, {
		name: "interfaces: summary line unless unexported methods, embedded methods included",
		src: `package p
import ("io"; "example.com/dep")
type Store interface {
	Claim(key string) (bool, error)
	io.Closer
}
type Option interface{ apply(*int); Name() string }
type Empty interface{}
type Source interface{ Records() []dep.Reader }
var Anon interface{ Close() error; Open(string) error }`,
		want: []string{
			"type Empty interface {}",
			"type Option interface, Name() string",
			"type Option interface, unexported methods",
			"type Source interface { Records }",
			"type Source interface, Records() []dep.Reader",
			"type Store interface { Claim, Close }",
			"type Store interface, Claim(string) (bool, error)",
			"type Store interface, Close() error",
			"var Anon interface{ Close() error; Open(string) error }",
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got []string
			for _, l := range features(typecheck(t, fixturePath, tt.src, dep)) {
				got = append(got, strings.TrimPrefix(l, "pkg "+fixturePath+", "))
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("features:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// TestFeaturesPrefix checks that every line names its package by its
// import path, as Go's api files do.
func TestFeaturesPrefix(t *testing.T) {
	t.Parallel()
	pkg := typecheck(t, "example.com/deep/p", "package p\nfunc F() {}\n")
	got := features(pkg)
	want := []string{"pkg example.com/deep/p, func F()"}
	if !slices.Equal(got, want) {
		t.Errorf("features = %q, want %q", got, want)
	}
}
