#!/usr/bin/env python3
"""Writes shared/tests/data/cron_corpus.json: the fire times of crontab expressions, across
real DST transitions, as cronsim (an independent implementation of Debian cron's rules)
computes them. shared/tests/it/cron_corpus.rs checks Punctual's schedule against it.

Run once, by hand, when the corpus changes (the data is committed):
    python3 -m venv /tmp/cronsim && /tmp/cronsim/bin/pip install cronsim==2.9
    /tmp/cronsim/bin/python scripts/cron-corpus.py
"""

import json
import pathlib
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import cronsim

FIRES = 6

EXPRESSIONS = [
    "* * * * *",
    "*/15 * * * *",
    "*/10 2 * * *",
    "*/20 1 * * *",
    "30 * * * *",
    "0 * * * *",
    "0 */6 * * *",
    "30 2 * * *",
    "15 2 * * *",
    "30 1 * * *",
    "45 1 * * *",
    "0 2 * * *",
    "15 3 * * *",
    "0 0 * * *",
    "0 9 * * 1-5",
    "0 6 * * 5-7",
    "5 4 * * SUN",
    "0 0 1 * MON",
    "0 12 13 * FRI",
    "45 23 L * *",
    "0 10 LW * *",
    "0 8 * * 5#2",
    "0 8 * * 5L",
    "0 0 29 2 *",
    "*/30 * * * * *",
    # Listed differences (shared/tests/it/cron_corpus.rs, DIFFERENCES):
    "0 1-3 * * *",
    "0 0 */10 * MON",
]

# Each zone's DST transitions in 2027 (UTC instants), and one ordinary day.
ZONES = {
    "Europe/Berlin": ["2027-03-28T01:00:00Z", "2027-10-31T01:00:00Z", "2027-06-15T10:00:00Z"],
    "America/New_York": ["2027-03-14T07:00:00Z", "2027-11-07T06:00:00Z", "2027-06-15T10:00:00Z"],
    # A 30-minute shift: 02:00 -> 01:30 in April, 02:00 -> 02:30 in October.
    "Australia/Lord_Howe": ["2027-04-03T15:00:00Z", "2027-10-02T15:30:00Z", "2027-06-15T10:00:00Z"],
    "Asia/Tokyo": ["2027-03-28T01:00:00Z", "2027-10-31T01:00:00Z", "2027-06-15T10:00:00Z"],
}

# How long before each instant a case starts: just before (frequent expressions cross the
# transition within a few fires), an hour before, a day before.
LEADS = [timedelta(seconds=150), timedelta(minutes=50), timedelta(hours=25)]


def utc(s):
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def iso(dt):
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def main():
    cases = []
    for zone, instants in ZONES.items():
        tz = ZoneInfo(zone)
        for instant in instants:
            for lead in LEADS:
                start = (utc(instant) - lead).astimezone(tz)
                for expr in EXPRESSIONS:
                    it = cronsim.CronSim(expr, start)
                    fires = [iso(next(it)) for _ in range(FIRES)]
                    cases.append({"expr": expr, "zone": zone, "after": iso(start), "fires": fires})
    out = pathlib.Path(__file__).resolve().parent.parent / "shared/tests/data/cron_corpus.json"
    out.write_text(json.dumps({"generator": "cronsim 2.9", "cases": cases}, indent=1) + "\n")
    print(f"{len(cases)} cases written to {out}")


if __name__ == "__main__":
    main()
