//! The planner: turns timers into task rows, one per occurrence, a horizon ahead.
//!
//! Two passes, each one transaction over a batch of the timers of the buckets the scanner
//! holds ([`Held`]), locked with SKIP LOCKED. Every statement checks that the scanner is
//! still a live member holding those buckets at their epochs ([`owned_join`]); the first
//! check locks its membership until the transaction ends, so no other scanner can take
//! the buckets before the pass is committed, and a scanner that lost them plans nothing:
//! * [`Planner::validate_new`] reads rows in `plan_status = 'new'` (plain SQL inserts,
//!   edits, resumes), checks them, and either marks them invalid with the reason or sets
//!   their first occurrence, planning it at once if it falls within the horizon;
//! * [`Planner::plan_due`] extends the plan of each active timer whose planned horizon is
//!   nearer than `horizon`, up to twice `horizon` ahead, so a timer's row is written about
//!   once per horizon, not once per occurrence. Occurrences due within the scanner's
//!   lookahead are written claimed by it (see [`task::PlanClaim`]): with a horizon of at
//!   most half the lookahead, that is every occurrence, and no task row is written twice
//!   before it runs.

use std::time::Duration;

use chrono::{DateTime, Utc};
use punctual_shared::bucket::{owned_join, Held, MEMBER};
use punctual_shared::policy::MisfirePolicy;
use punctual_shared::schedule::{Schedule, ScheduleKind};
use punctual_shared::task::{self, ClaimedTask, Misfired, PlanClaim, PlannedTask};
use punctual_shared::timer::TimerRow;
use punctual_shared::timer_state::{PlanStatus, TimerState};
use punctual_shared::timer_store::{self, PlanWrite};
use sqlx::PgPool;
use uuid::Uuid;

/// Most timers a pass reads; a pass that reads this many runs again at once.
pub const PASS_SIZE: i64 = 2_000;
/// Most tasks planned for one timer in one pass (a fanned-out occurrence is a task a shard).
const MAX_TASKS_PER_PASS: usize = 10_000;

#[derive(Debug, Clone)]
pub struct Planner {
    pub horizon: Duration,
    pub misfire_threshold: Duration,
}

/// What a pass did.
#[derive(Debug, Default)]
pub struct PassReport {
    pub timers: usize,
    pub tasks_planned: u64,
    pub invalid: usize,
    /// Missed occurrences left unplanned by their timers' misfire policies.
    pub misfired: Misfired,
    /// Tasks written claimed, committed: the caller holds and publishes them.
    pub claimed: Vec<ClaimedTask>,
}

impl PassReport {
    fn count(&mut self, row: &TimerRow, update: &PlanUpdate) {
        match row.misfire_policy {
            MisfirePolicy::Skip => self.misfired.skip += update.misfired,
            MisfirePolicy::FireOnce => self.misfired.fire_once += update.misfired,
            MisfirePolicy::FireAll => self.misfired.fire_all += update.misfired,
        }
        if update.plan_status == PlanStatus::Invalid {
            self.invalid += 1;
            tracing::warn!(timer_id = %row.id, reason = update.invalid_reason.as_deref(), "timer marked invalid");
        }
    }
}

/// The new plan state of a timer.
struct PlanUpdate {
    id: Uuid,
    plan_status: PlanStatus,
    next_plan_at: Option<DateTime<Utc>>,
    invalid_reason: Option<String>,
    /// Occurrences missed (later than the misfire threshold when planned) that its
    /// misfire policy left unplanned.
    misfired: u64,
}

impl Planner {
    /// Checks timers in `plan_status = 'new'` and sets their first occurrence to plan; a
    /// timer whose first occurrence falls within the horizon is planned in the same pass
    /// (with `claim`, as [`Planner::plan_due`] does), so a new timer's row is read and
    /// written once, not once to validate and again to plan.
    pub async fn validate_new(
        &self,
        db: &PgPool,
        now: DateTime<Utc>,
        held: &Held,
        claim: Option<&PlanClaim<'_>>,
    ) -> Result<PassReport, sqlx::Error> {
        self.validate_new_up_to(db, now, held, claim, PASS_SIZE).await
    }

    /// As [`Planner::validate_new`], taking at most `rows` timers.
    pub async fn validate_new_up_to(
        &self,
        db: &PgPool,
        now: DateTime<Utc>,
        held: &Held,
        claim: Option<&PlanClaim<'_>>,
        rows: i64,
    ) -> Result<PassReport, sqlx::Error> {
        if held.is_empty() {
            return Ok(PassReport::default());
        }
        let owned = owned_join("ob", "punctual_bucket(timers.id)");
        let mut tx = db.begin().await?;
        let out_of_range = timer_store::mark_out_of_range(&mut tx, held, rows).await?;
        if out_of_range > 0 {
            tracing::warn!(count = out_of_range, "timers with values out of range marked invalid");
        }
        // Out of range again here: a row written since the statement above (each statement
        // sees what is committed when it starts) is left for the next pass to mark.
        let found: Vec<TimerRow> = sqlx::query_as(&format!(
            "WITH {MEMBER}
             SELECT timers.* FROM timers {owned}
              WHERE plan_status = '{new}'
                AND punctual_timer_out_of_range(run_at, start_at, end_at, created_at,
                                                delay_ms, interval_ms, catchup_window_ms) IS NULL
              ORDER BY created_at LIMIT $3 FOR UPDATE OF timers SKIP LOCKED",
            // Spelled into the text, not bound, for the partial index `timers_plan_new`.
            new = PlanStatus::New.as_str(),
        ))
        .bind(&held.owner)
        .bind(held.epochs_by_bucket())
        .bind(rows)
        .fetch_all(&mut *tx)
        .await?;
        let mut report = PassReport { timers: found.len(), invalid: out_of_range as usize, ..Default::default() };
        let mut updates = Vec::with_capacity(found.len());
        let mut tasks = Vec::new();
        for row in &found {
            let update = guarded(row, &mut tasks, |tasks| self.validate_row(row, now, tasks));
            report.count(row, &update);
            updates.push(update);
        }
        write_tasks(&mut tx, &tasks, claim, &mut report).await?;
        write_updates(&mut tx, &updates).await?;
        tx.commit().await?;
        Ok(report)
    }

    /// Plans occurrences of the active timers whose plan ends within the horizon; with
    /// `claim`, those due before `claim.due_before` are written claimed.
    pub async fn plan_due(
        &self,
        db: &PgPool,
        now: DateTime<Utc>,
        held: &Held,
        claim: Option<&PlanClaim<'_>>,
    ) -> Result<PassReport, sqlx::Error> {
        if held.is_empty() {
            return Ok(PassReport::default());
        }
        let mut tx = db.begin().await?;
        let owned = owned_join("ob", "punctual_bucket(timers.id)");
        let rows: Vec<TimerRow> = sqlx::query_as(&format!(
            "WITH {MEMBER}
             SELECT timers.* FROM timers {owned}
              WHERE plan_status = '{planned}' AND state = '{active}' AND next_plan_at < $3
              ORDER BY next_plan_at LIMIT $4 FOR UPDATE OF timers SKIP LOCKED",
            // Spelled into the text, not bound: the partial index `timers_plan_due` serves
            // only a statement whose condition is its own.
            planned = PlanStatus::Planned.as_str(),
            active = TimerState::Active.as_str(),
        ))
        .bind(&held.owner)
        .bind(held.epochs_by_bucket())
        .bind(now + self.horizon())
        .bind(PASS_SIZE)
        .fetch_all(&mut *tx)
        .await?;
        let mut report = PassReport { timers: rows.len(), ..Default::default() };
        let mut tasks = Vec::new();
        let mut updates = Vec::with_capacity(rows.len());
        for row in &rows {
            let Some(first) = row.next_plan_at else {
                continue;
            };
            let update = guarded(row, &mut tasks, |tasks| match checked(row) {
                Ok(checked) => self.plan_timer(row, &checked, first, now, tasks),
                // Only reachable for a row changed behind the trigger's back, or stored
                // before a check that now refuses it.
                Err(e) => PlanUpdate::invalid(row.id, e.to_string()),
            });
            report.count(row, &update);
            updates.push(update);
        }
        write_tasks(&mut tx, &tasks, claim, &mut report).await?;
        write_updates(&mut tx, &updates).await?;
        tx.commit().await?;
        Ok(report)
    }

    /// Checks a timer in `plan_status = 'new'` and finds its first occurrence; plans it at
    /// once when it falls within the horizon.
    fn validate_row(&self, row: &TimerRow, now: DateTime<Utc>, tasks: &mut Vec<PlannedTask>) -> PlanUpdate {
        // The action too, though only the executor uses it, so that a timer that could
        // never run is marked invalid when it is created.
        let checked = match row.action().and_then(|_| checked(row)) {
            Ok(checked) => checked,
            Err(e) => return PlanUpdate::invalid(row.id, e.to_string()),
        };
        let schedule = &checked.schedule;
        let first = if schedule.is_one_shot() {
            // An occurrence whose history retention deleted ran long ago: not again.
            schedule.one_shot_at(row.created_at).filter(|at| row.pruned_through.is_none_or(|p| *at > p))
        } else {
            // A resumed timer continues from where its plan stopped, but not before now:
            // what was missed while paused is not fired. A new or edited timer (next_plan_at
            // reset by the schema's trigger) starts from when it was written, not from when
            // a busy scanner got to it: what fell due meanwhile fires late, or as its
            // misfire policy says.
            let from = row.next_plan_at.map_or(row.updated_at, |n| n.max(now));
            schedule.first_from(row.created_at, from)
        };
        match first {
            // Only an active timer is planned (a paused one keeps its first occurrence,
            // planned when it is resumed).
            Some(at) if row.state == TimerState::Active && at < now + self.horizon() => {
                self.plan_timer(row, &checked, at, now, tasks)
            }
            Some(at) => PlanUpdate {
                id: row.id,
                plan_status: PlanStatus::Planned,
                next_plan_at: Some(at),
                invalid_reason: None,
                misfired: 0,
            },
            None => match &schedule.kind {
                // A cron expression that never matches (30 February): invalid, not done.
                ScheduleKind::Cron(cron) => match cron.check_matches_from(now.max(schedule.start_at.unwrap_or(now))) {
                    Err(e) => PlanUpdate::invalid(row.id, format!("cron_expr: {e}")),
                    Ok(()) => PlanUpdate {
                        id: row.id,
                        plan_status: PlanStatus::Done,
                        next_plan_at: None,
                        invalid_reason: None,
                        misfired: 0,
                    },
                },
                _ => PlanUpdate {
                    id: row.id,
                    plan_status: PlanStatus::Done,
                    next_plan_at: None,
                    invalid_reason: None,
                    misfired: 0,
                },
            },
        }
    }

    fn horizon(&self) -> chrono::Duration {
        chrono::Duration::from_std(self.horizon).unwrap_or(chrono::Duration::seconds(10))
    }

    /// Pushes the occurrences of one timer from `first` up to twice the horizon ahead,
    /// applying its misfire policy to those missed, and returns its new plan state.
    fn plan_timer(
        &self,
        row: &TimerRow,
        checked: &Checked,
        first: DateTime<Utc>,
        now: DateTime<Utc>,
        tasks: &mut Vec<PlannedTask>,
    ) -> PlanUpdate {
        let misfire = chrono::Duration::from_std(self.misfire_threshold).unwrap_or(chrono::Duration::seconds(60));
        let plan_until = now + self.horizon() * 2;
        let policy = row.misfire_policy;
        let catchup_from = now.checked_sub_signed(checked.catchup_window).unwrap_or(DateTime::<Utc>::MIN_UTC);
        let (schedule, shards) = (&checked.schedule, checked.shards);
        let planned_before = tasks.len();
        let mut misfired = 0;
        let mut latest_missed: Option<DateTime<Utc>> = None;
        let mut next = Some(first);
        while let Some(at) = next {
            if at >= plan_until || tasks.len() - planned_before >= MAX_TASKS_PER_PASS {
                break;
            }
            let missed = at < now - misfire;
            let pruned = row.pruned_through.is_some_and(|p| at <= p);
            let keep = !pruned
                && match (missed, policy) {
                    (false, _) => true,
                    (true, MisfirePolicy::Skip) => false,
                    // Of a run of missed occurrences only the latest fires: remember it.
                    (true, MisfirePolicy::FireOnce) => {
                        latest_missed = Some(at);
                        false
                    }
                    (true, MisfirePolicy::FireAll) => at >= catchup_from,
                };
            if missed && !pruned && !keep {
                misfired += 1;
            }
            if keep {
                if let Some(m) = latest_missed.take() {
                    misfired -= 1;
                    tasks.extend(PlannedTask::shards_of(row.id, m, row.version, shards));
                }
                tasks.extend(PlannedTask::shards_of(row.id, at, row.version, shards));
            }
            next = if schedule.is_one_shot() { None } else { schedule.next_after(row.created_at, at) };
        }
        if let Some(m) = latest_missed {
            misfired -= 1;
            tasks.extend(PlannedTask::shards_of(row.id, m, row.version, shards));
        }
        match next {
            Some(at) => PlanUpdate {
                id: row.id,
                plan_status: PlanStatus::Planned,
                next_plan_at: Some(at),
                invalid_reason: None,
                misfired,
            },
            None => PlanUpdate {
                id: row.id,
                plan_status: PlanStatus::Done,
                next_plan_at: None,
                invalid_reason: None,
                misfired,
            },
        }
    }
}

impl PlanUpdate {
    fn invalid(id: Uuid, reason: String) -> Self {
        PlanUpdate {
            id,
            plan_status: PlanStatus::Invalid,
            next_plan_at: None,
            invalid_reason: Some(reason),
            misfired: 0,
        }
    }
}

/// What the planner needs of a row, checked: its schedule and its catch-up window.
/// What the planner reads of a timer's definition, checked.
struct Checked {
    schedule: Schedule,
    catchup_window: chrono::Duration,
    /// Tasks planned for each occurrence.
    shards: i16,
}

fn checked(row: &TimerRow) -> Result<Checked, punctual_shared::timer::FieldError> {
    Ok(Checked {
        schedule: row.schedule()?,
        catchup_window: row.catchup_window()?,
        shards: row.fan_out()?.planned_shards(),
    })
}

/// Runs `plan` for one row; if it panics, the row is marked invalid with the panic's
/// message instead, so that one row the planner cannot handle never stops it planning the
/// others (a panic would otherwise end the pass, and the next, on the same row). The
/// occurrences it had pushed before panicking are dropped.
fn guarded(
    row: &TimerRow,
    tasks: &mut Vec<PlannedTask>,
    plan: impl FnOnce(&mut Vec<PlannedTask>) -> PlanUpdate,
) -> PlanUpdate {
    let before = tasks.len();
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| plan(&mut *tasks))) {
        Ok(update) => update,
        Err(panic) => {
            tasks.truncate(before);
            let message = punctual_runtime::supervisor::panic_message(panic.as_ref());
            tracing::error!(timer_id = %row.id, %message, "planning the timer panicked: marked invalid");
            PlanUpdate::invalid(row.id, format!("internal error while planning this timer: {message}"))
        }
    }
}

/// Inserts the pass's occurrences, in statements of at most 10,000 rows.
async fn write_tasks(
    tx: &mut sqlx::PgConnection,
    tasks: &[PlannedTask],
    claim: Option<&PlanClaim<'_>>,
    report: &mut PassReport,
) -> Result<(), sqlx::Error> {
    for chunk in tasks.chunks(10_000) {
        let planned = task::plan(&mut *tx, chunk, claim).await?;
        report.tasks_planned += planned.written;
        report.claimed.extend(planned.claimed);
    }
    Ok(())
}

async fn write_updates(tx: &mut sqlx::PgConnection, updates: &[PlanUpdate]) -> Result<(), sqlx::Error> {
    let writes: Vec<PlanWrite> = updates
        .iter()
        .map(|u| PlanWrite {
            id: u.id,
            plan_status: u.plan_status,
            next_plan_at: u.next_plan_at,
            invalid_reason: u.invalid_reason.as_deref(),
        })
        .collect();
    timer_store::write_plans(tx, &writes).await
}
