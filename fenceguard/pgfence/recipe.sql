-- fencegate's resource-side check in SQL alone, for writers that are not Go.
-- Every write sets the row's fence column (bigint) to the x-fence-verified
-- value it was checked under. The trigger runs on the locked, latest version
-- of the row, so the comparison and the write are one atomic step: a write
-- under the stored fence passes (one holder writes many times), a lower one
-- is refused with SQLSTATE FG409, a write without a fence with FG428.
CREATE OR REPLACE FUNCTION fencegate_refuse_stale() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.fence IS NULL THEN
    RAISE EXCEPTION 'fencegate: a write without a fence' USING ERRCODE = 'FG428';
  END IF;
  IF TG_OP = 'UPDATE' AND OLD.fence IS NOT NULL AND NEW.fence < OLD.fence THEN
    RAISE EXCEPTION 'fencegate: stale fence % (stored %)', NEW.fence, OLD.fence
      USING ERRCODE = 'FG409';
  END IF;
  RETURN NEW;
END $$;
