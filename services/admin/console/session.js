// The signed-in key, as `GET /v1/me` describes it: what the pages offer follows from it.
export const session = { me: null };

/** Whether the key may change timers (a `write` or `admin` key). */
export const canWrite = () => session.me !== null && (session.me.role === "write" || session.me.role === "admin");
