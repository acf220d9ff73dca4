// A schedule in words, from a timer's `schedule` as the API answers it.

const DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];

export function duration(ms) {
  const parts = [];
  let rest = Math.round(ms / 1000);
  for (const [unit, size] of [["d", 86400], ["h", 3600], ["min", 60], ["s", 1]]) {
    if (rest >= size) {
      parts.push(`${Math.floor(rest / size)} ${unit}`);
      rest %= size;
    }
  }
  return parts.length ? parts.join(" ") : `${ms} ms`;
}

const number = (field) => /^\d+$/.test(field);
const pad = (n) => String(n).padStart(2, "0");

/**
 * The common cron shapes in words ("at 02:00 every day, Europe/Berlin"); any other
 * expression as itself. Fields: seconds first when there are six or seven.
 */
export function describeCron(expr, zone) {
  const fields = expr.trim().split(/\s+/);
  const where = zone || "UTC";
  if (fields.length === 5) fields.unshift("0");
  if (fields.length === 6 || fields.length === 7) {
    const [sec, min, hour, dom, month, dow] = fields;
    const year = fields[6] || "*";
    const anyDate = dom === "*" || dom === "?";
    const anyDay = dow === "*" || dow === "?";
    if (month === "*" && year === "*") {
      const step = (f) => f.match(/^\*\/(\d+)$/);
      if (step(sec) && min === "*" && hour === "*" && anyDate && anyDay) return `every ${step(sec)[1]} seconds`;
      if (sec === "0" && step(min) && hour === "*" && anyDate && anyDay) return `every ${step(min)[1]} minutes`;
      if (sec === "0" && number(min) && hour === "*" && anyDate && anyDay) return `at minute ${min} of every hour`;
      if (number(sec) && number(min) && number(hour)) {
        const time = `${pad(hour)}:${pad(min)}${sec === "0" ? "" : `:${pad(sec)}`}`;
        if (anyDate && anyDay) return `at ${time} every day, ${where}`;
        if (anyDate && /^[0-7](-[0-7])?$/.test(dow)) {
          const [from, to] = dow.split("-").map((d) => DAYS[Number(d) % 7]);
          return `at ${time} ${to ? `${from} to ${to}` : `every ${from}`}, ${where}`;
        }
        if (number(dom) && anyDay) return `at ${time} on day ${dom} of every month, ${where}`;
      }
    }
  }
  return `cron ${expr} (${where})`;
}

export function describeSchedule(s) {
  if (s.cron) return describeCron(s.cron, s.timezone);
  if (s.at) return `once at ${new Date(s.at).toLocaleString()}`;
  if (s.delay_ms != null) return `once, ${duration(s.delay_ms)} after it was created`;
  if (s.every_ms != null) return `every ${duration(s.every_ms)}`;
  return "—";
}
