// Drives the official @exceptionless/node client against the local collector.
//
// Usage: EXCEPTIONLESS_SERVER_URL=<collector url> EXCEPTIONLESS_API_KEY=<project key> node send.mjs
// (the key is not an argument: the client reports its command line with every event)
// Prints one JSON object on stdout (the last line): what the client did and every request it
// made. The client's own log goes to stderr. Any request to a host other than the collector's
// is refused before it leaves the process.

const serverUrl = process.env.EXCEPTIONLESS_SERVER_URL;
const apiKey = process.env.EXCEPTIONLESS_API_KEY;
if (!serverUrl || !apiKey) {
  console.error("set EXCEPTIONLESS_SERVER_URL and EXCEPTIONLESS_API_KEY");
  process.exit(2);
}
const origin = new URL(serverUrl).origin;

const requests = [];
const realFetch = globalThis.fetch.bind(globalThis);
// Installed before the client is loaded: its submission client binds globalThis.fetch.
globalThis.fetch = async (input, init) => {
  const url = typeof input === "string" ? input : input.url;
  const entry = { method: (init && init.method) || "GET", url, status: null };
  requests.push(entry);
  if (new URL(url).origin !== origin) {
    entry.status = "refused";
    throw new Error(`refused to reach ${url}: only ${origin} is allowed`);
  }
  const headers = (init && init.headers) || {};
  entry.user_agent = headers["User-Agent"] || null;
  const response = await realFetch(input, init);
  entry.status = response.status;
  return response;
};

const stderrLog = {
  minimumLogLevel: "trace",
  trace: (m) => process.stderr.write(`[trace] ${m}\n`),
  info: (m) => process.stderr.write(`[info] ${m}\n`),
  warn: (m) => process.stderr.write(`[warn] ${m}\n`),
  error: (m) => process.stderr.write(`[error] ${m}\n`),
};

const { Exceptionless } = await import("@exceptionless/node");
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const defaults = {};
await Exceptionless.startup((c) => {
  defaults.serverUrl = c.serverUrl;
  defaults.configServerUrl = c.configServerUrl;
  defaults.heartbeatServerUrl = c.heartbeatServerUrl;
  c.apiKey = apiKey;
  c.serverUrl = serverUrl; // also sets configServerUrl and heartbeatServerUrl
  c.configServerUrl = serverUrl;
  c.heartbeatServerUrl = serverUrl;
  c.services.log = stderrLog;
  c.setUserIdentity("node-user-1", "Node Interop User");
  // Session start on startup, the session id managed by the client; heartbeats are sent by
  // hand below (the automatic ones are at least 30 s apart).
  c.useSessions(false, 60000, true);
});
const config = Exceptionless.config;
const sessionId = config.currentSessionIdentifier;

// The session start goes out; its 202 carries X-Exceptionless-ConfigVersion, newer than the
// client's 0, so the client fetches /api/v2/projects/config before this returns.
await Exceptionless.processQueue();
const settingsAfterFirstPost = { version: config.settingsVersion, settings: { ...config.settings } };

await Exceptionless.submitLog("interop.node", "hello from the node client", "Info");
await Exceptionless.submitLog("interop.muted", "this log is switched off by the server", "Error");
let error;
try {
  throw new TypeError("boom from the node client");
} catch (caught) {
  error = caught;
}
await Exceptionless.submitException(error);
const errorReferenceId = Exceptionless.getLastReferenceId();
await Exceptionless.submitFeatureUsage("interop-feature");
await Exceptionless.submitNotFound("/interop/missing-page");
await Exceptionless.processQueue();

await Exceptionless.updateUserEmailAndDescription(
  errorReferenceId,
  "ann@example.com",
  "I clicked the button and it broke",
);

await sleep(1100);
await Exceptionless.submitSessionHeartbeat();
await sleep(1100);
await Exceptionless.submitSessionEnd();
await Exceptionless.suspend();

process.stdout.write(
  "\n" +
    JSON.stringify({
      client_version: config.userAgent,
      defaults,
      server_url: config.serverUrl,
      config_server_url: config.configServerUrl,
      heartbeat_server_url: config.heartbeatServerUrl,
      session_id: sessionId,
      error_reference_id: errorReferenceId,
      settings_after_first_post: settingsAfterFirstPost,
      settings_version: config.settingsVersion,
      settings: config.settings,
      requests,
    }) +
    "\n",
);
