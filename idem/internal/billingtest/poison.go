package billingtest

import "time"

// The database refuses invoices of customer "poison" (a constraint the
// source does not know about), so their writes fail on every attempt, until
// the accept statements drop the trigger. Each comes in both dialects, for
// DB.Exec.
const (
	RefusePoisonSQLite = `CREATE TRIGGER refuse_poison BEFORE INSERT ON invoices WHEN NEW.customer_id = 'poison'
		BEGIN SELECT RAISE(ABORT, 'poison invoice refused'); END`
	RefusePoisonPostgres = `CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.customer_id = 'poison' THEN RAISE EXCEPTION 'poison invoice refused'; END IF; RETURN NEW; END $$;
		CREATE TRIGGER refuse_poison BEFORE INSERT ON invoices FOR EACH ROW EXECUTE FUNCTION refuse_poison()`
	AcceptPoisonSQLite   = `DROP TRIGGER refuse_poison`
	AcceptPoisonPostgres = `DROP TRIGGER refuse_poison ON invoices`
)

// RunGap separates runs: twice the overlap, so only a watermark held at a
// failed unit makes a run fetch that unit again.
const RunGap = 20 * time.Minute
