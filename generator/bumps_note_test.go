package generator

import (
	"strings"
	"testing"

	"github.com/idemgen/idemgen/generator/internal/model"
)

// An insert_once row is never changed, so a job version bump's note must
// not promise that a Run or a Backfill rewrites it; an upsert's note does.
func TestJobBumpNoteInsertOnce(t *testing.T) {
	j := &model.Job{Name: "csv_import", GoName: "CsvImport", Version: 2, Source: model.SourceWatermark,
		Dest: &model.Dest{Table: "csv_rows", Write: model.InsertOnce}}
	note := jobBumpNote(j, 1)
	if strings.Contains(note, "rewrites") || !strings.Contains(note, "rows already in csv_rows stay as they are (write: insert_once)") {
		t.Fatalf("note: %s", note)
	}
	j.Dest.Write = model.Upsert
	if note := jobBumpNote(j, 1); !strings.Contains(note, "the next Run rewrites the csv_rows rows") || !strings.Contains(note, "a Backfill those in the window it is given") {
		t.Fatalf("upsert note: %s", note)
	}
}
