// Headgate web inbox. No framework, no build step: fetch, EventSource and WebAuthn.
// Every decision is signed by the approver's passkey over the decision itself (its RFC 8785
// form); the proposal digest in it is computed here, from the proposal this page shows.
"use strict";

const enc = new TextEncoder();
const body = document.body;
const skew = body.dataset.now ? Date.parse(body.dataset.now) - Date.now() : 0;

function b64u(buf) {
  const bytes = new Uint8Array(buf);
  let s = "";
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function fromB64u(text) {
  const s = atob(text.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((text.length + 3) % 4));
  return Uint8Array.from(s, (c) => c.charCodeAt(0));
}

// RFC 8785 (JSON Canonicalization Scheme): keys sorted by UTF-16 code units (what sort() does),
// no whitespace, strings and numbers as JSON.stringify writes them (which is what RFC 8785 says).
function canonical(value) {
  if (value === null || typeof value !== "object") return JSON.stringify(value);
  if (Array.isArray(value)) return "[" + value.map(canonical).join(",") + "]";
  return "{" + Object.keys(value).sort().map((k) => JSON.stringify(k) + ":" + canonical(value[k])).join(",") + "}";
}

async function sha256hex(text) {
  const digest = await crypto.subtle.digest("SHA-256", enc.encode(text));
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

function nonce() {
  return Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, "0")).join("");
}

function csrf() {
  const meta = document.querySelector('meta[name="csrf-token"]');
  return meta ? meta.content : "";
}

async function post(url, data) {
  const response = await fetch(url, {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf() },
    body: JSON.stringify(data || {}),
  });
  let answer = {};
  try { answer = await response.json(); } catch (e) { answer = {}; }
  if (!response.ok) throw new Error(answer.error || `HTTP ${response.status}`);
  return answer;
}

function say(el, text, kind) {
  if (!el) return;
  el.textContent = text;
  el.className = "status" + (kind ? " " + kind : "");
}

// What became of a decision stays on screen after its item leaves the inbox.
function flash(text, kind) {
  const el = document.getElementById("flash");
  if (!el) return;
  el.textContent = text;
  el.className = "flash" + (kind ? " " + kind : "");
}

function creationOptions(o) {
  return {
    ...o,
    challenge: fromB64u(o.challenge),
    user: { ...o.user, id: fromB64u(o.user.id) },
    excludeCredentials: (o.excludeCredentials || []).map((c) => ({ ...c, id: fromB64u(c.id) })),
  };
}

function requestOptions(o) {
  return {
    ...o,
    challenge: fromB64u(o.challenge),
    allowCredentials: (o.allowCredentials || []).map((c) => ({ ...c, id: fromB64u(c.id) })),
  };
}

function assertionJSON(cred) {
  const r = cred.response;
  return {
    id: cred.id, rawId: b64u(cred.rawId), type: cred.type,
    response: {
      authenticatorData: b64u(r.authenticatorData), clientDataJSON: b64u(r.clientDataJSON),
      signature: b64u(r.signature), userHandle: r.userHandle ? b64u(r.userHandle) : null,
    },
  };
}

// ------------------------------------------------------------------ invitation and sign-in
async function register(button) {
  const status = button.parentElement.querySelector(".status");
  const token = location.pathname.split("/").pop();
  button.disabled = true;
  try {
    say(status, "Waiting for your device…");
    const { options } = await post(`/api/invite/${token}/begin`);
    const cred = await navigator.credentials.create({ publicKey: creationOptions(options) });
    const r = cred.response;
    const credential = {
      id: cred.id, rawId: b64u(cred.rawId), type: cred.type,
      response: {
        clientDataJSON: b64u(r.clientDataJSON), attestationObject: b64u(r.attestationObject),
        transports: r.getTransports ? r.getTransports() : [],
      },
    };
    const answer = await post(`/api/invite/${token}/finish`, { credential, label: navigator.userAgent });
    say(status, `Passkey registered for ${answer.approver}. Opening the inbox…`, "ok");
    location.assign(answer.next);
  } catch (e) {
    say(status, `Not registered: ${e.message}`, "error");
    button.disabled = false;
  }
}

async function signin(button) {
  const status = button.parentElement.querySelector(".status");
  button.disabled = true;
  try {
    const { options } = await post("/api/signin/begin");
    const cred = await navigator.credentials.get({ publicKey: requestOptions(options) });
    const answer = await post("/api/signin/finish", { credential: assertionJSON(cred) });
    location.assign(answer.next);
  } catch (e) {
    say(status, `Not signed in: ${e.message}`, "error");
    button.disabled = false;
  }
}

// ------------------------------------------------------------------ what is shown is what is signed
function escapeRegExp(s) { return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"); }

// True when `shown` (masked: •••• for a secret, … for a cut, runs of white space collapsed)
// can be a rendering of one of the candidate texts.
function renders(shown, candidates) {
  let text = shown.trim();
  let cut = false;
  if (text.endsWith("…")) { cut = true; text = text.slice(0, -1); }
  const pattern = text.split("••••").map((part) =>
    part.split(/\s+/).map(escapeRegExp).join("\\s*")).join("[\\s\\S]*?");
  const re = new RegExp("^" + pattern + (cut ? "" : "$"));
  return candidates.some((c) => re.test(c.replace(/\s+/g, " ").trim()));
}

function candidatesOf(value) {
  const out = [];
  const walk = (v) => {
    if (typeof v === "string") out.push(v);
    else if (v !== null && typeof v === "object") {
      out.push(JSON.stringify(v));
      Object.values(v).forEach(walk);
    } else out.push(JSON.stringify(v));
  };
  walk(value);
  out.push(canonical(value));
  return out;
}

async function checkShown(item) {
  // The exact proposal, fetched now (the page never holds its secrets): its digest is what
  // gets signed, and what the page shows must be a rendering of it.
  const response = await fetch(`/api/requests/${encodeURIComponent(item.dataset.requestId)}/proposal`,
    { credentials: "same-origin", cache: "no-store" });
  const answer = await response.json();
  if (!response.ok) throw new Error(answer.error || `HTTP ${response.status}`);
  const text = answer.proposal;
  const digest = await sha256hex(text);
  if (digest !== item.dataset.digest) {
    throw new Error("the proposal on this page does not match the request's digest; reload");
  }
  const p = JSON.parse(text);
  const same = (a, b) => String(a) === String(b);
  if (!same(p.id, item.dataset.proposalId) || !same(p.agent, item.dataset.agent) ||
      !same(p.tool, item.dataset.tool) || !same(p.workspace || "default", item.dataset.workspace)) {
    throw new Error("the page shows another call than the one it would sign; reload");
  }
  const shown = (sel) => { const el = item.querySelector(sel); return el ? el.textContent : null; };
  if (shown(".tool") !== p.tool) throw new Error("the tool shown is not the proposal's; reload");
  const target = shown(".target");
  if (target !== null && !renders(target, candidatesOf(p.arguments || {}))) {
    throw new Error("the command shown is not the proposal's; reload");
  }
  const intent = shown(".intent-text");
  if ((intent === null) !== !p.intent || (intent !== null && !renders(intent, [p.intent]))) {
    throw new Error("the intent shown is not the proposal's; reload");
  }
  return digest;
}

// ------------------------------------------------------------------ decisions
let busy = 0;
let queued = null;

async function decide(item, verdict, reason) {
  const status = item.querySelector(".status");
  const buttons = item.querySelectorAll("button");
  busy += 1;
  buttons.forEach((b) => (b.disabled = true));
  try {
    const digest = await checkShown(item);
    const decision = {
      approver: body.dataset.approver,
      issued_at: new Date(Date.now() + skew).toISOString(),
      key: null,
      nonce: nonce(),
      proposal_digest: digest,
      reason: reason,
      request_id: item.dataset.requestId,
      signature_scheme: "rfc8785",
      verdict: verdict,
    };
    say(status, "Confirm with your passkey…");
    const allow = JSON.parse(body.dataset.credentials || "[]").map((id) => ({ type: "public-key", id: fromB64u(id) }));
    const cred = await navigator.credentials.get({
      publicKey: {
        challenge: enc.encode(canonical(decision)), rpId: body.dataset.rpId,
        allowCredentials: allow, userVerification: "required", timeout: 120000,
      },
    });
    const a = assertionJSON(cred);
    const passkey = {
      credential_id: a.id, authenticator_data: a.response.authenticatorData,
      client_data_json: a.response.clientDataJSON, signature: a.response.signature,
      user_handle: a.response.userHandle,
    };
    say(status, "Sending…");
    const answer = await post("/api/decide", { decision, passkey });
    const rid = item.dataset.requestId;
    if (answer.accepted) {
      const done = `${verdict === "approve" ? "Approved" : "Rejected"} ${rid}: ${answer.message}`;
      say(status, done, "ok");
      flash(done, "ok");
      item.classList.add("done");
    } else {
      say(status, `Refused ${rid}: ${answer.message}`, "error");
      flash(`Refused ${rid}: ${answer.message}`, "error");
      buttons.forEach((b) => (b.disabled = false));
    }
  } catch (e) {
    say(status, `Not sent: ${e.message}`, "error");
    flash(`Not sent ${item.dataset.requestId}: ${e.message}`, "error");
    buttons.forEach((b) => (b.disabled = false));
  } finally {
    busy -= 1;
    flush();
  }
}

function openReason(item) {
  const form = item.querySelector("form.reason");
  form.hidden = false;
  form.querySelector("input").focus();
}

document.addEventListener("click", (event) => {
  const target = event.target;
  if (!(target instanceof Element)) return;
  const item = target.closest("article.item");
  if (target.matches("button.approve") && item) decide(item, "approve", "");
  else if (target.matches("button.reject") && item) openReason(item);
  else if (target.id === "register") register(target);
  else if (target.id === "signin") signin(target);
  else if (target.id === "signout") post("/api/signout").then((a) => location.assign(a.next), () => location.assign("/signin"));
});

document.addEventListener("submit", (event) => {
  const form = event.target;
  if (!(form instanceof HTMLFormElement) || !form.matches("form.reason")) return;
  event.preventDefault();
  const reason = form.querySelector("input").value.trim();
  if (!reason) return;
  form.hidden = true;
  decide(form.closest("article.item"), "reject", reason);
});

// ------------------------------------------------------------------ live updates
function editing() {
  return busy > 0 || Array.from(document.querySelectorAll("form.reason")).some((f) => !f.hidden);
}

function flush() {
  if (queued === null || editing()) return;
  const inbox = document.getElementById("inbox");
  if (inbox) inbox.innerHTML = queued;
  queued = null;
  tick();
}

function live() {
  const inbox = document.getElementById("inbox");
  if (!inbox || !window.EventSource) return;
  const badge = document.getElementById("live");
  const source = new EventSource(inbox.dataset.live);
  source.addEventListener("inbox", (event) => {
    queued = JSON.parse(event.data).html;
    flush();
  });
  source.addEventListener("open", () => { if (badge) { badge.textContent = "Live"; badge.className = "live"; } });
  source.addEventListener("error", () => { if (badge) { badge.textContent = "Reconnecting…"; badge.className = "live off"; } });
}

function left(ms) {
  const s = Math.floor(ms / 1000);
  if (s <= 0) return "expired";
  if (s < 120) return `${s}s left`;
  if (s < 7200) return `${Math.floor(s / 60)}m left`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m left`;
}

function tick() {
  const now = Date.now() + skew;
  document.querySelectorAll(".left[data-expires]").forEach((el) => {
    el.textContent = left(Date.parse(el.dataset.expires) - now);
  });
}

document.addEventListener("focusout", () => setTimeout(flush, 0));
document.addEventListener("keydown", (event) => {
  if (event.key === "Escape") {
    document.querySelectorAll("form.reason").forEach((f) => { if (!f.querySelector("input").value) f.hidden = true; });
    flush();
  }
});

live();
tick();
setInterval(tick, 1000);
window.headgate = { canonical, sha256hex, renders, candidatesOf };
