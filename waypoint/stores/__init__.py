"""Where Waypoint keeps bytes outside history: one confine-verify-encrypt path, two users.

```
blobs.BlobStore    confine (64-hex names only), verify (content hash on every read), seal when
                   keys are set; over one of two backends:
blobs.Folder         files under a root (regular files only, atomic writes)
s3.Bucket            objects under a prefix of an S3-compatible bucket (`WAYPOINT_STORE`, boto3)
sealing.Sealer     AES-256-GCM with the payload codec's keys and rotation; keyed (HMAC) names
gc                 delete what no open run references, once older than the retention
payloads           Temporal's ExternalStorage driver for large payloads, and the data converter
transcripts        the transcript store: a run's messages as a hash chain of blobs
sqlite.Store       a SQLite file processes share (console sessions, notice deliveries)
```
A refused reference decodes to a marker (`_security.refused`), never to a hang. Nothing here
is imported at package import time: Temporal's workflow sandbox must not load `cryptography`.
"""
