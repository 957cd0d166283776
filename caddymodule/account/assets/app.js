// My Account: the copy button of a new API key. No other script runs on these pages.
"use strict";
document.addEventListener("click", async (ev) => {
  const btn = ev.target.closest("button[data-copy]");
  if (!btn) return;
  const field = document.getElementById(btn.dataset.copy);
  const status = document.getElementById("copy-status");
  if (!field) return;
  let ok = false;
  try {
    await navigator.clipboard.writeText(field.value);
    ok = true;
  } catch (e) {
    // Older browsers, or a page not served over https: select the text and copy it.
    field.focus();
    field.select();
    try { ok = document.execCommand("copy"); } catch (e2) { ok = false; }
  }
  if (status) {
    status.textContent = ok ? "Copied to the clipboard." : "Could not copy: select the key and copy it yourself.";
  }
  btn.textContent = ok ? "Copied" : "Copy";
});
