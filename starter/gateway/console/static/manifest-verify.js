// Verifies a run manifest's signatures in the browser, trusting nothing the page's server
// said about them: it fetches the manifest's bytes and the public JWK Set, recomputes the
// RFC 8785 (JCS) bytes of the manifest without its "signatures" member, and checks each
// detached JWS (ES256 or RS256) with WebCrypto against the key its kid names. The kid is
// the key's RFC 7638 thumbprint, recomputed here, so the kid shown names the key itself.

const ALGS = {
  ES256: {
    kty: "EC",
    members: ["crv", "kty", "x", "y"],
    importAs: { name: "ECDSA", namedCurve: "P-256" },
    verifyAs: { name: "ECDSA", hash: "SHA-256" },
  },
  RS256: {
    kty: "RSA",
    members: ["e", "kty", "n"],
    importAs: { name: "RSASSA-PKCS1-v1_5", hash: "SHA-256" },
    verifyAs: { name: "RSASSA-PKCS1-v1_5" },
  },
};
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const TOKEN = new RegExp(
  "[ \\t\\n\\r]*(?:([{}[\\],:])" + // punctuation
    '|("(?:[^"\\\\\\u0000-\\u001f]|\\\\(?:["\\\\/bfnrt]|u[0-9a-fA-F]{4}))*")' + // a string
    "|(-?(?:0|[1-9]\\d*)(?:\\.\\d+)?(?:[eE][+-]?\\d+)?)" + // a number
    "|(true|false|null))",
  "y",
);

/** The RFC 8785 (JCS) text of a JSON value: members sorted by UTF-16 code units, strings
 * and numbers as ECMAScript's JSON.stringify writes them (which is JCS's form). */
export function canonicalize(value) {
  if (value === null || typeof value === "boolean") return JSON.stringify(value);
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new Error(`${value} is not JSON`);
    return JSON.stringify(value);
  }
  if (typeof value === "string") {
    if (LONE_SURROGATE.test(value)) throw new Error("text holds a lone surrogate");
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) return `[${value.map(canonicalize).join(",")}]`;
  if (typeof value === "object") {
    const names = Object.keys(value).sort();
    return `{${names.map((k) => `${canonicalize(k)}:${canonicalize(value[k])}`).join(",")}}`;
  }
  throw new Error(`a ${typeof value} is not JSON`);
}

/** A JSON text parsed strictly, as the server's verifier parses it: duplicate member names
 * and integers beyond 2^53 - 1 (which would lose digits) are refused. */
export function parseStrict(text) {
  let at = 0;
  const next = () => {
    TOKEN.lastIndex = at;
    const m = TOKEN.exec(text);
    if (!m) throw new Error(`not JSON at character ${at}`);
    at = TOKEN.lastIndex;
    return m;
  };
  const value = (m = next()) => {
    if (m[2] !== undefined) return JSON.parse(m[2]);
    if (m[3] !== undefined) {
      const n = Number(m[3]);
      if (/^-?\d+$/.test(m[3]) && !Number.isSafeInteger(n)) {
        throw new Error(`${m[3]} is beyond the safe integers`);
      }
      return n;
    }
    if (m[4] !== undefined) return JSON.parse(m[4]);
    if (m[1] === "[") return array();
    if (m[1] === "{") return object();
    throw new Error(`unexpected ${m[1]} at character ${at}`);
  };
  const array = () => {
    const out = [];
    let m = next();
    if (m[1] === "]") return out;
    for (;;) {
      out.push(value(m));
      m = next();
      if (m[1] === "]") return out;
      if (m[1] !== ",") throw new Error(`expected , or ] at character ${at}`);
      m = next();
    }
  };
  const object = () => {
    const out = {};
    let m = next();
    if (m[1] === "}") return out;
    for (;;) {
      if (m[2] === undefined) throw new Error(`expected a name at character ${at}`);
      const name = JSON.parse(m[2]);
      if (Object.hasOwn(out, name)) throw new Error(`duplicate member ${JSON.stringify(name)}`);
      if (next()[1] !== ":") throw new Error(`expected : at character ${at}`);
      Object.defineProperty(out, name, { value: value(), enumerable: true, writable: true });
      m = next();
      if (m[1] === "}") return out;
      if (m[1] !== ",") throw new Error(`expected , or } at character ${at}`);
      m = next();
    }
  };
  const result = value();
  if (!/^[ \t\n\r]*$/.test(text.slice(at))) {
    throw new Error(`text after the JSON at character ${at}`);
  }
  return result;
}

const utf8 = (text) => new TextEncoder().encode(text);

function b64url(bytes) {
  let bin = "";
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function unb64url(text) {
  if (!/^[A-Za-z0-9_-]*$/.test(text)) throw new Error("not base64url");
  const bin = atob(text.replace(/-/g, "+").replace(/_/g, "/"));
  return Uint8Array.from(bin, (c) => c.charCodeAt(0));
}

/** The RFC 7638 thumbprint of a public JWK (base64url SHA-256 of its required members). */
export async function thumbprint(jwk, alg) {
  const members = Object.fromEntries(ALGS[alg].members.map((k) => [k, jwk[k]]));
  return b64url(new Uint8Array(await crypto.subtle.digest("SHA-256", utf8(canonicalize(members)))));
}

async function publicKey(jwks, kid, alg) {
  const jwk = (jwks.keys || []).find((k) => k && k.kid === kid);
  if (!jwk) throw new Error(`key ${kid} is not in the gateway's JWKS`);
  const spec = ALGS[alg];
  if (jwk.kty !== spec.kty || (jwk.alg !== undefined && jwk.alg !== alg)) {
    throw new Error(`key ${kid} is not an ${alg} key`);
  }
  if (alg === "ES256" && jwk.crv !== "P-256") throw new Error(`key ${kid} is not on P-256`);
  if ((await thumbprint(jwk, alg)) !== kid) throw new Error(`key ${kid} is not its thumbprint`);
  const members = Object.fromEntries(spec.members.map((k) => [k, jwk[k]]));
  return crypto.subtle.importKey("jwk", members, spec.importAs, false, ["verify"]);
}

async function verifyOne(entry, payload, jwks, i) {
  const parts = typeof entry.signature === "string" ? entry.signature.split(".") : [];
  if (parts.length !== 3 || parts[1] !== "") {
    throw new Error(`signature ${i} is not a detached compact JWS`);
  }
  const header = parseStrict(new TextDecoder("utf-8", { fatal: true }).decode(unb64url(parts[0])));
  const names = Object.keys(header).sort().join(",");
  if (names !== "alg,kid" || !ALGS[header.alg] || typeof header.kid !== "string") {
    throw new Error(`signature ${i} has an unexpected protected header`);
  }
  if (header.alg !== entry.algorithm || header.kid !== entry.kid) {
    throw new Error(`signature ${i}: its entry disagrees with its JWS header`);
  }
  const key = await publicKey(jwks, header.kid, header.alg);
  const signed = utf8(`${parts[0]}.${b64url(payload)}`);
  const ok = await crypto.subtle.verify(ALGS[header.alg].verifyAs, key, unb64url(parts[2]), signed);
  if (!ok) throw new Error(`signature ${i} by key ${header.kid} does not match the manifest`);
  return { kid: header.kid, alg: header.alg };
}

/** Verifies every signature of a manifest (its text as served) against a JWK Set; returns
 * [{kid, alg}] in order, or throws an Error saying why the manifest does not verify. */
export async function verifyManifest(manifestText, jwks) {
  const document = parseStrict(manifestText);
  if (document === null || typeof document !== "object" || Array.isArray(document)) {
    throw new Error("a manifest is a JSON object");
  }
  const { signatures, ...unsigned } = document;
  if (!Array.isArray(signatures) || signatures.length === 0) {
    throw new Error("the manifest is unsigned");
  }
  const payload = utf8(canonicalize(unsigned));
  const verified = [];
  for (const [i, entry] of signatures.entries()) {
    verified.push(await verifyOne(entry || {}, payload, jwks, i));
  }
  return verified;
}

async function fetched(url) {
  const answer = await fetch(url, { credentials: "same-origin", cache: "no-store" });
  if (!answer.ok) throw new Error(`${url} answered HTTP ${answer.status}`);
  return answer.text();
}

/** Lists the approvals of a verified manifest (who decided, how, when, on which digest)
 * in ``[data-manifest-approvals]``: what the signature covers, not what the page said. */
function showApprovals(doc, approvals) {
  const list = doc.querySelector("[data-manifest-approvals]");
  if (!list || !Array.isArray(approvals)) return;
  const items = approvals.map((a) => {
    const item = doc.createElement("li");
    const version = a.policy_version != null ? `, policy version ${a.policy_version}` : "";
    const digest = a.approved_digest ? `, digest ${a.approved_digest}` : "";
    item.textContent = `${a.approver} (${a.approval_type}) at ${a.approved_at}${digest}${version}`;
    return item;
  });
  if (items.length === 0) {
    items.push(doc.createElement("li"));
    items[0].textContent = "None: the manifest records no approval.";
  }
  list.replaceChildren(...items);
  list.hidden = false;
  const label = doc.querySelector("[data-manifest-approvals-label]");
  if (label) label.hidden = false;
}

/** Fills the page's check region (``[data-manifest-check]``) with the outcome. */
export async function checkPage(doc = document) {
  const region = doc.querySelector("[data-manifest-check]");
  if (!region) return null;
  const say = (text, outcome) => {
    region.textContent = text;
    region.dataset.outcome = outcome;
    region.className = { verified: "success", failed: "error" }[outcome] || "notice";
  };
  say("Checking the manifest's signature in this browser…", "checking");
  const started = performance.now();
  try {
    if (!globalThis.crypto || !crypto.subtle) {
      throw new Error("this page is not a secure context (HTTPS), so WebCrypto is off");
    }
    const [text, jwksText] = await Promise.all([
      fetched(region.dataset.manifestUrl),
      fetched(region.dataset.jwksUrl),
    ]);
    const keys = await verifyManifest(text, JSON.parse(jwksText));
    const named = keys.map((k) => `key ${k.kid}, ${k.alg}`).join("; ");
    say(`Signature verified (${named})`, "verified");
    const shown = doc.querySelector("[data-manifest-text]");
    if (shown) shown.textContent = text;
    showApprovals(doc, parseStrict(text).approvals);
  } catch (err) {
    say(`Signature does NOT verify: ${err.message}`, "failed");
  }
  region.dataset.ms = (performance.now() - started).toFixed(1);
  return region.dataset.outcome;
}

if (typeof document !== "undefined") checkPage();
