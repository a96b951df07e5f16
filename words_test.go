package checkout_test

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// TestWordsAreTrue keeps what the README, docs/ and code comments cite in
// step with the tree: every relative link and file path they name exists,
// every package.Identifier of this module they name is declared, every
// section of docs/ a comment cites by title is there, every figure a
// comment gives as a page's ("the 1 s wait of docs/design.md") is on that page
// (in that section, if it names one), a comment saying a page lists each
// variable names a page that lists each its file reads, and the README and
// docs carry no commit hashes or words about how the work was organised.
// A reader who copies the code follows these names; a stale one is worse
// than none.
func TestWordsAreTrue(t *testing.T) {
	t.Parallel()
	for _, problem := range checkWords(".") {
		t.Error(problem)
	}
}

// TestWordsCheckFindsEachBreakage runs the check on a small tree with one
// breakage of each kind it must find.
func TestWordsCheckFindsEachBreakage(t *testing.T) {
	t.Parallel()
	files := map[string]string{
		"go.mod":                  "module example.com/m\n",
		"internal/order/store.go": "package order\n",
		"internal/order/order.go": `// Package order is the aggregate; see docs/design.md, "Durability".
package order

// Service places orders; see order.Place, internal/order/store.go and limit.go.
type Service struct{}

// Get loads one; Service.Get is its method.
func (Service) Get() {}
`,
		"docs/design.md": "# Design\n\n## Invariants\n\nSee [the code](../internal/order/order.go) and `order.Service`, within 5 s.\n" +
			"Measured at 1c5f25f in round 3.\n\n[gone](lifecycle.md#timers) and `order.Vanished` and [section](#missing)\n",
		"README.md": "See [design](docs/design.md#invariants) and `internal/order/gone.go`, as BRIEF.md says.\n" +
			"`SHOP_WAIT` is how long to wait.\n",
		"internal/order/wait.go": `package order

// Wait is the 5 s of docs/design.md, "Invariants", well inside the ~100 ms of docs/design.md, "Invariants".
var Wait = 5

// Cap is the 2 MiB ceiling of docs/design.md.
var Cap = 2
`,
		"cmd/shop/config.go": `package main

// config is read in one place. README.md lists each variable.
var config = []any{env.String("SHOP_NAME", ""), env.Duration("SHOP_WAIT", 0)}
`,
	}
	dir := t.TempDir()
	for name, body := range files {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := strings.Join(checkWords(dir), "\n")
	for _, want := range []string{
		`internal/order/order.go:1: cites docs/design.md section "Durability", which it does not have`,
		`internal/order/order.go:4: cites order.Place, which package order does not declare`,
		`internal/order/order.go:4: cites limit.go, which is not in the tree`,
		`docs/design.md:6: commit hash "1c5f25f"`,
		`docs/design.md:6: words about how the work was organised ("round 3")`,
		`docs/design.md:8: links to lifecycle.md#timers, which does not exist`,
		`docs/design.md:8: cites order.Vanished, which package order does not declare`,
		`docs/design.md:8: links to #missing: no such section`,
		`README.md:1: names internal/order/gone.go, which does not exist`,
		`README.md:1: cites BRIEF.md, which is not in the tree`,
		`internal/order/wait.go:3: gives ~100 ms as docs/design.md section "Invariants"'s, which does not have it`,
		`internal/order/wait.go:6: gives 2 MiB as docs/design.md's, which does not have it`,
		`cmd/shop/config.go:3: says README.md lists each variable, which lacks SHOP_NAME`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the check missed %q; it found:\n%s", want, got)
		}
	}
	for _, fine := range []string{"order.Service", "Service.Get", "store.go", "design.md#invariants", "5 s", "SHOP_WAIT"} {
		if strings.Contains(got, fine) {
			t.Errorf("the check flagged a true citation (%s):\n%s", fine, got)
		}
	}
}

var (
	// mdLink matches [text](target) and ![alt](target).
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// treePath matches a path into the tree, as the README or a comment
	// names it.
	treePath = regexp.MustCompile(`\b(?:cmd|internal|e2e|deploy|docs|scripts|migrations|api|tools|\.ci)/[\w./-]*[\w/]`)
	// goFile matches a Go or Markdown file name cited on its own.
	goFile = regexp.MustCompile(`(?:^|[\s(` + "`" + `"'])([\w-]+(?:/[\w.-]+)*\.(?:go|md))\b`)
	// qualified matches pkg.Identifier and pkg.Type.Member.
	qualified = regexp.MustCompile(`\b([a-z][a-z0-9]*)\.([A-Z]\w*)(?:\.([A-Za-z]\w*))?`)
	// docSection matches a citation of a docs page's section.
	docSection = regexp.MustCompile(`(docs/[\w-]+\.md),? \(?"([^"]+)"`)
	// docFigure matches a figure given as a page's, maybe a section's, as
	// in "the 1 s queue wait of docs/design.md, "Defaults"".
	docFigure = regexp.MustCompile(`(~?\d+(?:\.\d+)?) ?(ms|s|min|h|KiB|MiB|req/s|%)(?: [a-z][a-z ]{0,30}?)? of (docs/[\w-]+\.md)(?:,? \(?"([^"]+)")?`)
	// listsVariables matches a comment saying a page lists every variable
	// its file reads.
	listsVariables = regexp.MustCompile(`((?:docs/[\w-]+|README)\.md) lists (?:each|every) variable`)
	// hexWord matches a word that may be a commit hash.
	hexWord = regexp.MustCompile(`[0-9a-f]{7,40}`)
	// history matches words about how the work was organised.
	history = regexp.MustCompile(`(?i)\b(issue #?\d+|round \d+|last stop|this session|earlier session)\b`)
)

// checkWords returns one line per false citation under root.
func checkWords(root string) []string {
	tree := map[string]bool{}      // every file and directory, slash-separated, relative to root
	baseNames := map[string]bool{} // every file's base name
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil //nolint:nilerr // an unreadable entry is left out; the checks name what they cannot find
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.Name() == ".git" {
			tree[".git"] = true // a checkout: git can tell commits apart
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "bin" || d.Name() == "results") {
			return filepath.SkipDir
		}
		tree[rel] = true
		if !d.IsDir() {
			baseNames[d.Name()] = true
		}
		return nil
	})
	decls, comments := parseGo(root, tree)
	c := &citations{root: root, tree: tree, baseNames: baseNames, decls: decls, headings: map[string][]string{}}

	for _, path := range slices.Sorted(func(yield func(string) bool) {
		for p := range tree {
			if (p == "README.md" || strings.HasPrefix(p, "docs/")) && strings.HasSuffix(p, ".md") && !yield(p) {
				return
			}
		}
	}) {
		c.markdown(path)
	}
	for _, cm := range comments {
		c.prose(cm.file, cm.line, cm.text, false)
		c.figures(cm)
		c.variables(cm)
	}
	return c.problems
}

// goComment is one comment line of a Go file.
type goComment struct {
	file string
	line int
	text string
}

// parseGo reads every Go file under root: the declarations of each package
// name (top-level names and Type.Member for methods and fields) and every
// comment line.
func parseGo(root string, tree map[string]bool) (map[string]map[string]bool, []goComment) {
	decls := map[string]map[string]bool{}
	var comments []goComment
	fset := token.NewFileSet()
	for _, path := range slices.Sorted(func(yield func(string) bool) {
		for p := range tree {
			if strings.HasSuffix(p, ".go") && !strings.Contains(p, "testdata/") && !yield(p) {
				return
			}
		}
	}) {
		f, err := parser.ParseFile(fset, filepath.Join(root, path), nil, parser.ParseComments)
		if err != nil {
			continue
		}
		name := f.Name.Name
		name = strings.TrimSuffix(name, "_test")
		d := decls[name]
		if d == nil {
			d = map[string]bool{}
			decls[name] = d
		}
		for _, decl := range f.Decls {
			declare(d, decl)
		}
		for _, group := range f.Comments {
			for _, cm := range group.List {
				for i, line := range strings.Split(cm.Text, "\n") {
					comments = append(comments, goComment{file: path, line: fset.Position(cm.Pos()).Line + i, text: line})
				}
			}
		}
	}
	delete(decls, "main")
	return decls, comments
}

// declare records what decl declares.
func declare(d map[string]bool, decl ast.Decl) {
	switch decl := decl.(type) {
	case *ast.FuncDecl:
		if decl.Recv == nil || len(decl.Recv.List) == 0 {
			d[decl.Name.Name] = true
			return
		}
		if recv := receiverName(decl.Recv.List[0].Type); recv != "" {
			d[recv+"."+decl.Name.Name] = true
		}
	case *ast.GenDecl:
		for _, spec := range decl.Specs {
			switch spec := spec.(type) {
			case *ast.TypeSpec:
				d[spec.Name.Name] = true
				if st, ok := spec.Type.(*ast.StructType); ok {
					for _, field := range st.Fields.List {
						for _, n := range field.Names {
							d[spec.Name.Name+"."+n.Name] = true
						}
					}
				}
				if it, ok := spec.Type.(*ast.InterfaceType); ok {
					for _, m := range it.Methods.List {
						for _, n := range m.Names {
							d[spec.Name.Name+"."+n.Name] = true
						}
					}
				}
			case *ast.ValueSpec:
				for _, n := range spec.Names {
					d[n.Name] = true
				}
			}
		}
	}
}

func receiverName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return receiverName(e.X)
	case *ast.IndexExpr:
		return receiverName(e.X)
	case *ast.IndexListExpr:
		return receiverName(e.X)
	case *ast.Ident:
		return e.Name
	}
	return ""
}

// citations collects the problems found.
type citations struct {
	root      string
	tree      map[string]bool
	baseNames map[string]bool
	decls     map[string]map[string]bool
	headings  map[string][]string // markdown file → its heading titles
	problems  []string
}

func (c *citations) addf(file string, line int, format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf("%s:%d: ", file, line)+fmt.Sprintf(format, args...))
}

// markdown checks one README or docs page.
func (c *citations) markdown(path string) {
	f, err := os.Open(filepath.Join(c.root, path))
	if err != nil {
		c.addf(path, 0, "cannot read: %v", err)
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	fence := false
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
		}
		for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
			c.link(path, n, m[1])
		}
		c.hashes(path, n, line)
		c.prose(path, n, line, fence)
	}
}

// link checks one markdown link target.
func (c *citations) link(from string, line int, target string) {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return
	}
	file, anchor, _ := strings.Cut(target, "#")
	resolved := from
	if file != "" {
		resolved = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(from), file)))
		if !c.tree[resolved] {
			c.addf(from, line, "links to %s, which does not exist", target)
			return
		}
	}
	if anchor != "" && strings.HasSuffix(resolved, ".md") && !slices.Contains(c.slugs(resolved), anchor) {
		c.addf(from, line, "links to %s: no such section", target)
	}
}

// hashes flags words that name a commit: in a git checkout, hex words that
// git resolves to a commit of this repository; elsewhere, words of 7 to 10
// or 40 hex digits with a letter and a digit, standing alone (not part of a
// UUID, a trace id or an id).
func (c *citations) hashes(path string, line int, text string) {
	for _, loc := range hexWord.FindAllStringIndex(text, -1) {
		word := text[loc[0]:loc[1]]
		if loc[0] > 0 && isWordByte(text[loc[0]-1]) || loc[1] < len(text) && isWordByte(text[loc[1]]) {
			continue
		}
		if !strings.ContainsAny(word, "0123456789") || !strings.ContainsAny(word, "abcdef") {
			continue
		}
		if c.isCommit(word) {
			c.addf(path, line, "commit hash %q", word)
		}
	}
	if m := history.FindString(text); m != "" {
		c.addf(path, line, "words about how the work was organised (%q)", m)
	}
}

// isCommit reports whether word names a commit (see hashes).
func (c *citations) isCommit(word string) bool {
	if c.tree[".git"] {
		cmd := exec.Command("git", "-C", c.root, "cat-file", "-t", word)
		out, err := cmd.Output()
		return err == nil && strings.TrimSpace(string(out)) == "commit"
	}
	return len(word) <= 10 || len(word) == 40
}

// isWordByte: letters, digits and the characters ids are built with.
func isWordByte(b byte) bool {
	return b < 0x80 && (unicode.IsLetter(rune(b)) || unicode.IsDigit(rune(b))) || b == '_' || b == '-' || b == '/'
}

// prose checks the paths, files, identifiers and sections a line names.
// Inside a code block only identifiers are checked: paths there are
// commands' arguments and output.
func (c *citations) prose(file string, line int, text string, code bool) {
	if !code {
		for _, loc := range treePath.FindAllStringIndex(text, -1) {
			if loc[0] > 0 && (isWordByte(text[loc[0]-1]) || text[loc[0]-1] == ':') {
				continue // part of a URL or of a path outside the tree
			}
			p := strings.TrimRight(text[loc[0]:loc[1]], "./")
			if strings.ContainsAny(p, "*{}<>$") || c.tree[p] {
				continue
			}
			c.addf(file, line, "names %s, which does not exist", p)
		}
		for _, m := range goFile.FindAllStringSubmatch(text, -1) {
			name := m[1]
			if strings.Contains(name, "/") {
				continue // a path: treePath checked it
			}
			if !c.baseNames[name] {
				c.addf(file, line, "cites %s, which is not in the tree", name)
			}
		}
	}
	for _, m := range qualified.FindAllStringSubmatch(text, -1) {
		pkg, ident, member := m[1], m[2], m[3]
		d, ours := c.decls[pkg]
		if !ours {
			continue
		}
		if !d[ident] {
			c.addf(file, line, "cites %s.%s, which package %s does not declare", pkg, ident, pkg)
			continue
		}
		if member != "" && member != "go" && !d[ident+"."+member] {
			c.addf(file, line, "cites %s.%s.%s, which package %s does not declare", pkg, ident, member, pkg)
		}
	}
	for _, m := range docSection.FindAllStringSubmatch(text, -1) {
		page, section := m[1], m[2]
		if !c.tree[page] {
			c.addf(file, line, "cites %s, which does not exist", page)
			continue
		}
		if !slices.Contains(c.titles(page), section) {
			c.addf(file, line, "cites %s section %q, which it does not have", page, section)
		}
	}
}

// figures checks that a figure a comment gives as a page's is there: in
// the section it names, else anywhere on the page.
func (c *citations) figures(cm goComment) {
	for _, m := range docFigure.FindAllStringSubmatch(cm.text, -1) {
		number, unit, page, section := strings.TrimPrefix(m[1], "~"), m[2], m[3], m[4]
		if !c.tree[page] {
			continue // prose reports the missing page
		}
		where := page
		if section != "" {
			where = fmt.Sprintf("%s section %q", page, section)
		}
		figure := regexp.MustCompile(`(?:^|[^\d.])` + regexp.QuoteMeta(number) + `[ \x{00a0}]?` + regexp.QuoteMeta(unit) + `(?:[^\w/]|$)`)
		if !figure.MatchString(c.section(page, section)) {
			c.addf(cm.file, cm.line, "gives %s as %s's, which does not have it", m[1]+" "+unit, where)
		}
	}
}

// variables checks a comment saying a page lists each variable: every
// variable its file reads must be on that page, in backquotes.
func (c *citations) variables(cm goComment) {
	m := listsVariables.FindStringSubmatch(cm.text)
	if m == nil {
		return
	}
	src, _ := os.ReadFile(filepath.Join(c.root, cm.file))
	doc, err := os.ReadFile(filepath.Join(c.root, m[1]))
	if err != nil {
		c.addf(cm.file, cm.line, "says %s lists each variable, but it cannot be read", m[1])
		return
	}
	var missing []string
	for _, read := range envRead.FindAllStringSubmatch(string(src), -1) {
		if !strings.Contains(string(doc), "`"+read[1]+"`") {
			missing = append(missing, read[1])
		}
	}
	if len(missing) > 0 {
		c.addf(cm.file, cm.line, "says %s lists each variable, which lacks %s", m[1], strings.Join(missing, ", "))
	}
}

// section returns the text of a markdown file's section, from its heading
// to the next heading of the same or a higher level; the whole file for
// title "".
func (c *citations) section(path, title string) string {
	b, _ := os.ReadFile(filepath.Join(c.root, path))
	if title == "" {
		return string(b)
	}
	var out []string
	level := 0 // of the section's heading, once found
	fence := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
		}
		if !fence && strings.HasPrefix(line, "#") {
			l := len(line) - len(strings.TrimLeft(line, "#"))
			switch {
			case level > 0 && l <= level:
				return strings.Join(out, "\n")
			case level == 0 && strings.TrimSpace(line[l:]) == title:
				level = l
			}
		}
		if level > 0 {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// titles returns the heading titles of a markdown file.
func (c *citations) titles(path string) []string {
	if h, ok := c.headings[path]; ok {
		return h
	}
	var h []string
	b, _ := os.ReadFile(filepath.Join(c.root, path))
	fence := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
		}
		if !fence && strings.HasPrefix(line, "#") {
			h = append(h, strings.TrimSpace(strings.TrimLeft(line, "#")))
		}
	}
	c.headings[path] = h
	return h
}

// slugs returns a markdown file's heading anchors as GitHub makes them.
func (c *citations) slugs(path string) []string {
	var s []string
	seen := map[string]int{}
	for _, title := range c.titles(path) {
		slug := slugify(title)
		if n := seen[slug]; n > 0 {
			seen[slug]++
			slug = fmt.Sprintf("%s-%d", slug, n)
		} else {
			seen[slug] = 1
		}
		s = append(s, slug)
	}
	return s
}

// slugify is GitHub's heading anchor: lower case, punctuation dropped,
// spaces to hyphens.
func slugify(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}
