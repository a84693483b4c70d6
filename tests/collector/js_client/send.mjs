// The official JavaScript client against the local collector: node send.mjs <url> <api key>.
// Prints one JSON line: the error's reference id and the session id the client used.
import { Exceptionless, SettingsManager } from "@exceptionless/node";

const [serverUrl, apiKey] = process.argv.slice(2);

await Exceptionless.startup((c) => {
  c.apiKey = apiKey;
  c.serverUrl = serverUrl; // also the config and heartbeat URLs: nothing goes elsewhere
  c.useSessions(true, 1000, true); // heartbeats every second, the client's own session ids
  c.setUserIdentity("js-user", "JS User");
  c.defaultTags.push("interop");
});

await Exceptionless.submitLog("interop.loud", "hello from the js client", "Warn");
await Exceptionless.processQueue();
await SettingsManager.updateSettings(Exceptionless.config); // @@log:interop.quiet = Off
await Exceptionless.submitLog("interop.quiet", "filtered by the project's settings", "Error");

await Exceptionless.submitException(new TypeError("the js client failed on purpose"));
const reference = Exceptionless.getLastReferenceId();
await Exceptionless.submitFeatureUsage("js-export");
await Exceptionless.submitNotFound("/js/missing/page");
await Exceptionless.processQueue();

await Exceptionless.updateUserEmailAndDescription(
  reference,
  "js-user@example.com",
  "I clicked export and it broke.",
);
const session = Exceptionless.config.currentSessionIdentifier;
await Exceptionless.submitSessionHeartbeat();
await new Promise((resolve) => setTimeout(resolve, 1500));
await Exceptionless.submitSessionHeartbeat();
await Exceptionless.submitSessionEnd();
await Exceptionless.suspend();

console.log(JSON.stringify({ reference, session, settings: Exceptionless.config.settingsVersion }));
process.exit(0);
