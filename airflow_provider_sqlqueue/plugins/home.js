// Failed messages on Airflow's Home: the plugin's react_apps entry (destination "dashboard", Airflow 3.1
// and later). Airflow imports this module and renders the component it leaves at globalThis["SQL Queue"]
// with Airflow's own React (globalThis.React), so it needs no build step. The counts come from the
// plugin's /api/home with the user's Airflow session, which lists only the connections the user may read;
// each links to that connection's Queues page. Colours are shades of Airflow's palette, per mode (below).
const React = globalThis.React;
const h = React.createElement;
const API = new URL("api/home", import.meta.url);
const PAGE = new URL("queues", import.meta.url);
const REFRESH_MS = 60000;

// Airflow's palette: the darker shade on its light background, the lighter on its dark one (html.dark), so
// every text keeps 4.5:1 contrast in both modes (Airflow's own fg.error red is under it on white).
const shade = (hue, light, dark, fallbacks) =>
  `.sqlqueue-${hue}{color:var(--chakra-colors-${hue}-${light},${fallbacks[0]})}` +
  `.dark .sqlqueue-${hue}{color:var(--chakra-colors-${hue}-${dark},${fallbacks[1]})}`;
const CSS = [
  shade("red", 700, 300, ["#b91c1c", "#fca5a5"]),
  shade("green", 700, 300, ["#15803d", "#86efac"]),
  shade("blue", 700, 300, ["#1d4ed8", "#93c5fd"]),
  shade("gray", 600, 400, ["#52525b", "#a1a1aa"]),
].join("");
const styles = {
  box: {
    border: "1px solid var(--chakra-colors-border-emphasized, #d4d4d8)",
    borderRadius: "8px",
    padding: "12px 16px",
    marginBottom: "16px",
  },
  title: { fontSize: "1.125rem", fontWeight: 600, margin: "0 0 8px" },
  strong: { fontWeight: 600 },
  list: { listStyle: "none", margin: "8px 0 0", padding: 0, display: "grid", gap: "4px" },
  link: { textDecoration: "underline" },
};
const BAD = "sqlqueue-red";
const GOOD = "sqlqueue-green";
const LINK = "sqlqueue-blue";
const MUTED = "sqlqueue-gray";

const messages = (count, exact) => `${exact ? "" : "≈"}${count.toLocaleString()} failed message${count === 1 ? "" : "s"}`;

function pageOf(connId) {
  const url = new URL(PAGE);
  url.searchParams.set("conn_id", connId);
  return url.href;
}

function Connection({ row }) {
  let state;
  if (row.error) {
    state = h("span", { className: BAD, style: styles.strong }, `cannot be read: ${row.error}`);
  } else if (row.failed === null) {
    state = h("span", { className: MUTED }, "no error queue");
  } else {
    const look = row.failed ? { className: BAD, style: styles.strong } : { className: MUTED };
    state = h("span", look, messages(row.failed, row.failed_exact));
  }
  const label = `Queues page of ${row.conn_id}`;
  return h(
    "li",
    { "data-conn-id": row.conn_id },
    h("a", { href: pageOf(row.conn_id), className: LINK, style: styles.link, "aria-label": label, target: "_top" }, row.conn_id),
    ": ",
    state,
  );
}

function SqlQueueHome() {
  const [counts, setCounts] = React.useState(null);
  React.useEffect(() => {
    let live = true;
    const read = () =>
      fetch(API, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then((answer) => (answer.ok ? answer.json() : null))
        .catch(() => null)
        .then((read) => live && setCounts(read));
    read();
    const timer = setInterval(read, REFRESH_MS);
    return () => {
      live = false;
      clearInterval(timer);
    };
  }, []);
  if (!counts || counts.connections.length === 0) {
    return null;
  }
  const total = counts.failed
    ? h("span", { className: BAD, style: styles.strong, id: "sqlqueue-home-failed" }, messages(counts.failed, counts.failed_exact))
    : h("span", { className: GOOD, style: styles.strong, id: "sqlqueue-home-failed" }, "No failed messages");
  const more = counts.not_shown
    ? h("p", { className: MUTED, style: { margin: "8px 0 0" } }, `${counts.not_shown} more connections on the Queues page.`)
    : null;
  return h(
    "section",
    { "aria-label": "SQL Queue failed messages", style: styles.box, "data-testid": "sqlqueue-home" },
    h("style", null, CSS),
    h("h2", { style: styles.title }, "SQL Queue"),
    total,
    h("ul", { style: styles.list }, counts.connections.map((row) => h(Connection, { row, key: row.conn_id }))),
    more,
  );
}

globalThis["SQL Queue"] = SqlQueueHome;
globalThis.AirflowPlugin = SqlQueueHome;
