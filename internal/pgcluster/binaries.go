package pgcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// ErrNotInstalled means no PostgreSQL server binaries were found.
var ErrNotInstalled = errors.New("PostgreSQL server binaries (initdb, postgres) not found on PATH or under " +
	"/usr/lib/postgresql/<version>/bin: install the PostgreSQL server package, " +
	"e.g. `apt-get install -y postgresql`, or set DATABASE_URL")

// debianRoot is where Debian and Ubuntu install one directory per major version.
const debianRoot = "/usr/lib/postgresql"

type binaries struct {
	initdb   string
	postgres string
}

// findBinaries looks in binDir when given, else on PATH, else under the
// highest version in the Debian location. initdb and postgres must come from
// the same directory so their versions match.
func findBinaries(binDir string) (binaries, error) {
	if binDir != "" {
		b, ok := binariesIn(binDir)
		if !ok {
			return binaries{}, fmt.Errorf("no initdb and postgres in %s: %w", binDir, ErrNotInstalled)
		}
		return b, nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		// Debian puts symlinks (or nothing) on PATH. The real directory
		// holds the matching postgres.
		if real, err := filepath.EvalSymlinks(p); err == nil {
			if b, ok := binariesIn(filepath.Dir(real)); ok {
				return b, nil
			}
		}
		if b, ok := binariesIn(filepath.Dir(p)); ok {
			return b, nil
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(debianRoot, "*", "bin"))
	sort.Slice(dirs, func(i, j int) bool { return majorOf(dirs[i]) > majorOf(dirs[j]) })
	for _, d := range dirs {
		if b, ok := binariesIn(d); ok {
			return b, nil
		}
	}
	return binaries{}, ErrNotInstalled
}

// tool returns the path of another program of the server's installation
// (e.g. pg_basebackup), which must come from the same version.
func (b binaries) tool(name string) (string, error) {
	p := filepath.Join(filepath.Dir(b.postgres), name)
	if !isExecutable(p) {
		return "", fmt.Errorf("%s not found beside %s: install the PostgreSQL client package of the server's "+
			"version (Debian: `apt-get install -y postgresql`, which brings postgresql-client-<version>)", name, b.postgres)
	}
	return p, nil
}

func binariesIn(dir string) (binaries, bool) {
	b := binaries{initdb: filepath.Join(dir, "initdb"), postgres: filepath.Join(dir, "postgres")}
	return b, isExecutable(b.initdb) && isExecutable(b.postgres)
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// majorOf returns the version number in /usr/lib/postgresql/<version>/bin.
func majorOf(binDir string) float64 {
	v, err := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	if err != nil {
		return -1
	}
	return v
}

// serverUser is who runs initdb and postgres. It is nil when tether is not
// root. Then the server runs as the current user. initdb and postgres refuse
// to run as root, so as root they run as the `postgres` system user.
type serverUser struct {
	uid, gid uint32
	gids     []uint32
}

func lookupServerUser() (*serverUser, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, where initdb and postgres refuse to run, and no `postgres` "+
			"system user to run them as (%v): install the PostgreSQL server package, which creates it, "+
			"run tether as a non-root user, or set DATABASE_URL", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("parsing ids of user postgres: %w", err)
	}
	su := &serverUser{uid: uint32(uid), gid: uint32(gid)}
	if ids, err := u.GroupIds(); err == nil {
		for _, s := range ids {
			if g, err := strconv.ParseUint(s, 10, 32); err == nil {
				su.gids = append(su.gids, uint32(g))
			}
		}
	}
	return su, nil
}

func (u *serverUser) credential() *syscall.Credential {
	if u == nil {
		return nil
	}
	return &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: u.gids}
}

func (u *serverUser) chown(path string) error {
	if u == nil {
		return nil
	}
	if err := os.Chown(path, int(u.uid), int(u.gid)); err != nil {
		return fmt.Errorf("handing %s to the postgres user: %w", path, err)
	}
	return nil
}

// canSearch reports whether the server user may enter directory fi.
func (u *serverUser) canSearch(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return true
	}
	perm := fi.Mode().Perm()
	switch {
	case st.Uid == u.uid:
		return perm&0o100 != 0
	case st.Gid == u.gid || containsID(u.gids, st.Gid):
		return perm&0o010 != 0
	default:
		return perm&0o001 != 0
	}
}

func containsID(ids []uint32, id uint32) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// LibraryInstalled reports whether the server Start would run (binDir as
// Options.BinDir) has the shared library name (e.g. "pg_stat_statements")
// that shared_preload_libraries could load. A server told to preload a
// library it lacks does not start.
func LibraryInstalled(binDir, name string) bool {
	b, err := findBinaries(binDir)
	if err != nil {
		return false
	}
	dir := filepath.Join(filepath.Dir(filepath.Dir(b.postgres)), "lib") // Debian: <version>/bin → <version>/lib
	if out, err := exec.Command(filepath.Join(filepath.Dir(b.postgres), "pg_config"), "--pkglibdir").Output(); err == nil {
		if d := strings.TrimSpace(string(out)); d != "" {
			dir = d
		}
	}
	_, err = os.Stat(filepath.Join(dir, name+".so"))
	return err == nil
}
