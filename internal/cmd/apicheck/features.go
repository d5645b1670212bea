package main

import (
	"fmt"
	"go/types"
	"slices"
	"strings"
)

// features returns the exported API of pkg as lines in the format of
// Go's api/go1.*.txt files, one feature a line, each starting with
// "pkg <import path>, ", unsorted. Types are written as Go's api files
// write them: types of pkg by their names, types of other packages
// qualified by the package's name (time.Duration), byte and rune as
// uint8 and int32, aliases by what they stand for (any as interface{}),
// and type parameters by position ($0, $1). Unlike Go's files, a struct
// or interface type written inside another (a field of type
// struct{ ... }, a constraint interface{ ... }) is written in full, and
// a constraint interface's summary line lists its type terms: both are
// part of the API.
func features(pkg *types.Package) []string {
	w := &walker{pkg: pkg}
	scope := pkg.Scope()
	for _, name := range scope.Names() { // sorted
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		w.object(obj)
	}
	return w.lines
}

// A walker collects the features of one package.
type walker struct {
	pkg   *types.Package
	lines []string
}

// emit adds the feature "pkg <path>, <scope>, <text>"; scope is "" at
// the package level, or the type the feature belongs to ("type T struct").
func (w *walker) emit(scope, format string, args ...any) {
	prefix := "pkg " + w.pkg.Path() + ", "
	if scope != "" {
		prefix += scope + ", "
	}
	w.lines = append(w.lines, prefix+fmt.Sprintf(format, args...))
}

// object emits the features of one exported package-level object.
func (w *walker) object(obj types.Object) {
	switch obj := obj.(type) {
	case *types.Const:
		w.emit("", "const %s %s", obj.Name(), w.typeString(obj.Type()))
		short, exact := obj.Val().String(), obj.Val().ExactString()
		if short == exact {
			w.emit("", "const %s = %s", obj.Name(), short)
		} else {
			w.emit("", "const %s = %s  // %s", obj.Name(), short, exact)
		}
	case *types.Var:
		w.emit("", "var %s %s", obj.Name(), w.typeString(obj.Type()))
	case *types.Func:
		w.emit("", "func %s%s", obj.Name(), w.signatureString(obj.Signature()))
	case *types.TypeName:
		w.typeName(obj)
	default:
		panic(fmt.Sprintf("apicheck: unknown object %T: %v", obj, obj))
	}
}

// typeName emits a type declaration: the type, its fields or interface
// methods, and its methods (value receivers, then the pointer
// receivers' others).
func (w *walker) typeName(obj *types.TypeName) {
	if alias, ok := obj.Type().(*types.Alias); ok {
		name := obj.Name() + w.typeParamsString(alias.TypeParams(), true)
		w.emit("", "type %s = %s", name, w.typeString(alias.Rhs()))
		return
	}
	named, ok := obj.Type().(*types.Named)
	if !ok { // a predeclared type cannot be declared in a package
		panic(fmt.Sprintf("apicheck: type %s is a %T", obj.Name(), obj.Type()))
	}
	name := obj.Name() + w.typeParamsString(named.TypeParams(), true)
	switch u := named.Underlying().(type) {
	case *types.Struct:
		w.structType(name, named, u)
	case *types.Interface:
		w.interfaceType(name, u)
		return // its methods are the interface's
	default:
		w.emit("", "type %s %s", name, w.typeString(u))
	}
	w.methods(named)
}

// structType emits a struct type and its exported fields, embedded ones
// as "embedded T". Fields promoted from an embedded unexported struct
// are listed as its own (Go's api files leave them out): a user reaches
// them as T.F all the same.
func (w *walker) structType(name string, named *types.Named, s *types.Struct) {
	scope := "type " + name + " struct"
	w.emit("", "%s", scope)
	w.fields(scope, named, s, map[types.Type]bool{})
}

// fields emits the exported fields of s, a struct type in named's
// fields, following its unexported embedded structs; seen guards
// against embedding cycles.
func (w *walker) fields(scope string, named *types.Named, s *types.Struct, seen map[types.Type]bool) {
	for f := range s.Fields() {
		switch {
		case f.Exported() && f.Embedded():
			w.emit(scope, "embedded %s", w.typeString(f.Type()))
		case f.Exported():
			// Unless a shallower field of the name hides it, or two at one
			// depth make it ambiguous.
			if obj, _, _ := types.LookupFieldOrMethod(named, true, w.pkg, f.Name()); obj == f {
				w.emit(scope, "%s %s", f.Name(), w.typeString(f.Type()))
			}
		case f.Embedded():
			t := types.Unalias(f.Type())
			if p, ok := t.(*types.Pointer); ok {
				t = types.Unalias(p.Elem())
			}
			if inner, ok := t.Underlying().(*types.Struct); ok && !seen[t] {
				seen[t] = true
				w.fields(scope, named, inner, seen)
			}
		}
	}
}

// interfaceType emits an interface type's exported methods (its own and
// its embedded interfaces'), then either "unexported methods" (only the
// package can implement it, so it may grow) or a summary line naming
// every method and type term: a method added to an interface others
// implement changes that line, and so breaks the baseline.
func (w *walker) interfaceType(name string, iface *types.Interface) {
	scope := "type " + name + " interface"
	var summary []string
	sealed := false
	for m := range iface.Methods() { // sorted by name
		if !m.Exported() {
			sealed = true
			continue
		}
		summary = append(summary, m.Name())
		w.emit(scope, "%s%s", m.Name(), w.signatureString(m.Signature()))
	}
	if sealed {
		w.emit(scope, "unexported methods")
		return
	}
	summary = append(summary, w.typeTerms(iface)...)
	if len(summary) == 0 {
		w.emit("", "%s {}", scope)
		return
	}
	w.emit("", "%s { %s }", scope, strings.Join(summary, ", "))
}

// methods emits the exported methods of a named non-interface type,
// including those promoted from embedded fields: the value receiver's
// method set, then what the pointer receiver's adds.
func (w *walker) methods(named *types.Named) {
	seen := map[string]bool{}
	for _, recv := range []types.Type{named, types.NewPointer(named)} {
		mset := types.NewMethodSet(recv)
		for sel := range mset.Methods() {
			m := sel.Obj()
			if !m.Exported() || seen[m.Name()] {
				continue
			}
			seen[m.Name()] = true
			sig := sel.Type().(*types.Signature) // its receiver is recv
			w.emit("", "method (%s%s) %s%s", w.typeString(recv),
				w.typeParamsString(named.TypeParams(), false), m.Name(), w.signatureString(sig))
		}
	}
}

// typeTerms returns the type terms of an interface used as a constraint
// (~int|~string), from it and the interfaces it embeds, sorted.
func (w *walker) typeTerms(iface *types.Interface) []string {
	var terms []string
	for t := range iface.EmbeddedTypes() {
		switch t := types.Unalias(t).(type) {
		case *types.Union:
			terms = append(terms, w.typeString(t))
		case *types.Interface:
			terms = append(terms, w.typeTerms(t)...)
		case *types.Named:
			if t.Obj().Pkg() == nil && t.Obj().Name() == "comparable" {
				terms = append(terms, "comparable")
			} else if embedded, ok := t.Underlying().(*types.Interface); ok {
				terms = append(terms, w.typeTerms(embedded)...)
			} else {
				terms = append(terms, w.typeString(t)) // a single-type term
			}
		default:
			terms = append(terms, w.typeString(t))
		}
	}
	slices.Sort(terms)
	return terms
}

// typeString writes a type as Go's api files do (see features).
func (w *walker) typeString(t types.Type) string {
	var b strings.Builder
	w.writeType(&b, t)
	return b.String()
}

func (w *walker) signatureString(sig *types.Signature) string {
	var b strings.Builder
	w.writeSignature(&b, sig)
	return b.String()
}

// typeParamsString writes a type parameter list, "" for none:
// "[$0 interface{}, $1 comparable]", or "[$0, $1]" without constraints
// (a method's receiver).
func (w *walker) typeParamsString(list *types.TypeParamList, constraints bool) string {
	if list.Len() == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteByte('[')
	for i := range list.Len() {
		if i > 0 {
			b.WriteString(", ")
		}
		tp := list.At(i)
		w.writeType(&b, tp)
		if constraints {
			b.WriteByte(' ')
			w.writeType(&b, tp.Constraint())
		}
	}
	b.WriteByte(']')
	return b.String()
}

func (w *walker) writeType(b *strings.Builder, t types.Type) {
	switch t := t.(type) {
	case *types.Basic:
		b.WriteString(basicName(t))
	case *types.Pointer:
		b.WriteByte('*')
		w.writeType(b, t.Elem())
	case *types.Slice:
		b.WriteString("[]")
		w.writeType(b, t.Elem())
	case *types.Array:
		fmt.Fprintf(b, "[%d]", t.Len())
		w.writeType(b, t.Elem())
	case *types.Map:
		b.WriteString("map[")
		w.writeType(b, t.Key())
		b.WriteByte(']')
		w.writeType(b, t.Elem())
	case *types.Chan:
		w.writeChan(b, t)
	case *types.Signature:
		b.WriteString("func")
		w.writeSignature(b, t)
	case *types.Struct:
		w.writeStruct(b, t)
	case *types.Interface:
		w.writeInterface(b, t)
	case *types.Union:
		for i := range t.Len() {
			if i > 0 {
				b.WriteByte('|')
			}
			if t.Term(i).Tilde() {
				b.WriteByte('~')
			}
			w.writeType(b, t.Term(i).Type())
		}
	case *types.Alias:
		w.writeType(b, types.Unalias(t))
	case *types.Named:
		w.writeNamed(b, t)
	case *types.TypeParam:
		// Renaming a type parameter changes no caller: write its place.
		fmt.Fprintf(b, "$%d", t.Index())
	default:
		panic(fmt.Sprintf("apicheck: unknown type %T: %v", t, t))
	}
}

// basicName is Go's api files' name of a basic type: untyped constants'
// types are "ideal-int" and so on, byte and rune their real names.
func basicName(t *types.Basic) string {
	switch t.Kind() {
	case types.UntypedBool:
		return "ideal-bool"
	case types.UntypedInt:
		return "ideal-int"
	case types.UntypedRune:
		return "ideal-char"
	case types.UntypedFloat:
		return "ideal-float"
	case types.UntypedComplex:
		return "ideal-complex"
	case types.UntypedString:
		return "ideal-string"
	case types.UnsafePointer:
		return "unsafe.Pointer"
	}
	return types.Typ[t.Kind()].Name() // byte is uint8, rune int32
}

func (w *walker) writeChan(b *strings.Builder, t *types.Chan) {
	switch t.Dir() {
	case types.SendOnly:
		b.WriteString("chan<- ")
	case types.RecvOnly:
		b.WriteString("<-chan ")
	default:
		b.WriteString("chan ")
		// chan (<-chan T), not the receive-only channel of chan T.
		if elem, ok := types.Unalias(t.Elem()).(*types.Chan); ok && elem.Dir() == types.RecvOnly {
			b.WriteByte('(')
			w.writeType(b, elem)
			b.WriteByte(')')
			return
		}
	}
	w.writeType(b, t.Elem())
}

// writeStruct writes a struct type literal in full: struct{ A int; B
// string "tag" }. Field order and tags are part of the type.
func (w *walker) writeStruct(b *strings.Builder, t *types.Struct) {
	if t.NumFields() == 0 {
		b.WriteString("struct{}")
		return
	}
	b.WriteString("struct{ ")
	for i := range t.NumFields() {
		if i > 0 {
			b.WriteString("; ")
		}
		f := t.Field(i)
		if !f.Embedded() {
			b.WriteString(f.Name() + " ")
		}
		w.writeType(b, f.Type())
		if tag := t.Tag(i); tag != "" {
			fmt.Fprintf(b, " %q", tag)
		}
	}
	b.WriteString(" }")
}

// writeInterface writes an interface type literal in full, its methods
// and embedded types each sorted (their order is not part of the type):
// interface{ Close() error; io.Reader; ~int|~string }.
func (w *walker) writeInterface(b *strings.Builder, t *types.Interface) {
	var elems []string
	for m := range t.ExplicitMethods() {
		elems = append(elems, m.Name()+w.signatureString(m.Signature()))
	}
	slices.Sort(elems)
	var embedded []string
	for e := range t.EmbeddedTypes() {
		embedded = append(embedded, w.typeString(e))
	}
	slices.Sort(embedded)
	elems = append(elems, embedded...)
	if len(elems) == 0 {
		b.WriteString("interface{}")
		return
	}
	b.WriteString("interface{ " + strings.Join(elems, "; ") + " }")
}

// writeNamed writes a defined type: by its name in its own package, by
// its package's name and its name elsewhere, with its type arguments.
func (w *walker) writeNamed(b *strings.Builder, t *types.Named) {
	obj := t.Obj()
	if obj.Pkg() != nil && obj.Pkg().Path() != w.pkg.Path() {
		b.WriteString(obj.Pkg().Name() + ".")
	}
	b.WriteString(obj.Name())
	args := t.TypeArgs()
	if args.Len() == 0 {
		return
	}
	b.WriteByte('[')
	for i := range args.Len() {
		if i > 0 {
			b.WriteString(", ")
		}
		w.writeType(b, args.At(i))
	}
	b.WriteByte(']')
}

// writeSignature writes a function's type parameters, parameters and
// results, without names: [$0 comparable]([]$0, ...string) (int, error).
func (w *walker) writeSignature(b *strings.Builder, sig *types.Signature) {
	b.WriteString(w.typeParamsString(sig.TypeParams(), true))
	w.writeTuple(b, sig.Params(), sig.Variadic())
	switch res := sig.Results(); res.Len() {
	case 0:
	case 1:
		b.WriteByte(' ')
		w.writeType(b, res.At(0).Type())
	default:
		b.WriteByte(' ')
		w.writeTuple(b, res, false)
	}
}

func (w *walker) writeTuple(b *strings.Builder, t *types.Tuple, variadic bool) {
	b.WriteByte('(')
	for i := range t.Len() {
		if i > 0 {
			b.WriteString(", ")
		}
		typ := t.At(i).Type()
		if variadic && i == t.Len()-1 {
			b.WriteString("...")
			if s, ok := typ.Underlying().(*types.Slice); ok {
				typ = s.Elem()
			}
		}
		w.writeType(b, typ)
	}
	b.WriteByte(')')
}
