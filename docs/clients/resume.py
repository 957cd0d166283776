# A client that survives a cut stream: Python 3.8+, standard library only.
import http.client, json, os, sys, urllib.error, urllib.request

API, KEY = os.environ.get("TEXTGEN_URL", "http://127.0.0.1:8080"), os.environ["TEXTGEN_KEY"]

def generate(body, idempotency_key, tries=5):
    text, rid = b"", None
    for _ in range(tries):
        if rid is None:  # generate; a retry with the same Idempotency-Key is never charged twice
            req = urllib.request.Request(API + "/api/v1/generate", json.dumps(body).encode(), {
                "X-API-Key": KEY, "Content-Type": "application/json", "Idempotency-Key": idempotency_key})
        else:  # resume the kept generation where the cut stream stopped, at no charge
            req = urllib.request.Request(f"{API}/api/v1/generations/{rid}", headers={
                "X-API-Key": KEY, "Accept": "text/plain", "Range": f"bytes={len(text)}-"})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                rid = rid or resp.headers.get("X-Generation-Id") or resp.headers["X-Request-Id"]
                while chunk := resp.read1(65536):
                    text += chunk
                return text.decode()
        except urllib.error.HTTPError:
            raise  # an answer (402, 404...), not a cut
        except (OSError, http.client.HTTPException):
            pass  # cut: try again
    raise RuntimeError("the stream was cut too often")

if __name__ == "__main__":
    sys.stdout.write(generate(json.loads(sys.argv[1]), sys.argv[2]))
