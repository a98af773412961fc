"""Ray Serve deployments of the run config's served models (scripted, hf; vllm in serving.vllm).

``serving.app.deploy`` runs each model as its own Serve app with a handle API (``complete_batch``,
used by ``models.serve_handle.ServeHandleProvider``) and an OpenAI-compatible HTTP API.
"""
