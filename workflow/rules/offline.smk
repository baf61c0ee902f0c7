# Offline clusters (config key offline.cache_dir, mars/pipeline/offline.py): one local job, on the login node that
# reaches the hub, fetches what the run needs into the cache; the compute jobs then read it with the hub switched off
# (OFFLINE_ENV, common.smk). Nothing is fetched twice, and local folders (a mirror: `mars mirror`) are not fetched.
# Gated data sets (Idavidrein/gpqa) need HF_TOKEN, or `hf auth login`, on the login node.

if OFFLINE_CACHE:

    rule prefetch:
        output:
            PREFETCH_FLAG,
        params:
            job=J.as_param(prefetch_job(config)),
            cache=OFFLINE_CACHE,
        localrule: True
        conda:
            "../../envs/eval.yaml"
        log:
            str(RESULTS / "logs" / "prefetch.log"),
        shell:
            "mars prefetch --job {params.job:q} --cache {params.cache} --output {output} > {log} 2>&1"
