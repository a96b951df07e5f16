// Package migrations embeds the application's SQL schema so that the
// checkout binary can apply it with `checkout migrate` without any files on
// disk. River's own tables are not here: internal/database applies them with
// rivermigrate, so the schema version always matches the River library that
// the binaries are built with.
package migrations

import "embed"

// FS holds the goose migrations, applied in file-name order.
//
//go:embed *.sql
var FS embed.FS
