# ruff: noqa
# fmt: off
# What ran on the H200 (see README.md here); these two header lines were added after the run.
import json,os,statistics as st,subprocess as sp,sys,tempfile,time
from pathlib import Path
L=[("vllm","VLLM_CACHE_ROOT","/root/.cache/vllm"),("inductor","TORCHINDUCTOR_CACHE_DIR","/root/.cache/inductor"),("triton","TRITON_CACHE_DIR","/root/.triton/cache"),("aiter","AITER_JIT_DIR","/root/.aiter/jit")]
S=str(Path(__file__).parent/"cache-bake.sh")
P=("import_s","triton_s","compile_first_s","steady_s","process_s")
def run(paths):
    e={**os.environ,"TRITON_CACHE_AUTOTUNING":"1"}
    for n,v,_ in L:
        e[v]=str(paths[n]);paths[n].mkdir(parents=True,exist_ok=True)
    s=time.time();t=time.perf_counter()
    p=sp.run([sys.executable,str(Path(__file__).parent/"k.py")],env=e,capture_output=True,text=True)
    w=time.perf_counter()-t
    r=[x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
    if p.returncode or not r:sys.exit(p.stdout[-2000:]+p.stderr[-3000:])
    r=json.loads(r[-1][7:]);r["process_s"]=w
    fs=[f for q in paths.values() for f in q.rglob("*") if f.is_file()]
    r["files"]=len(fs);r["new_files"]=sum(f.stat().st_mtime>=s for f in fs);return r
def summ(rs):return{k:{"median":st.median(r[k] for r in rs),"min":min(r[k] for r in rs),"max":max(r[k] for r in rs)} for k in (*P,"new_files","files")}
n=int(sys.argv[1]);out=Path(sys.argv[2]);W=Path(tempfile.mkdtemp());cold=[];baked=[]
for i in range(n):
    cold.append(run({x[0]:W/f"cold{i}"/x[0] for x in L}));print("cold",i,{k:round(cold[-1][k],2) for k in (*P,"new_files")},flush=True)
lay=W/"cache-layer.tar";t=time.perf_counter()
dg=sp.run(["sh",S,"pack",str(W/"cold0"),str(lay),*[f"{a}={c}" for a,_,c in L]],check=True,capture_output=True,text=True).stdout.strip()
ps=time.perf_counter()-t;per={}
for ln in sp.run(["sh",S,"list",str(W/"cold0")],check=True,capture_output=True,text=True).stdout.splitlines():
    a,b=ln.split("\t",1)
    if a!="checksum":d=per.setdefault(b.split("/")[0],[0,0]);d[0]+=1;d[1]+=int(a)
print("layer",lay.stat().st_size,dg,round(ps,2),per,flush=True)
for i in range(n):
    R=W/f"restored{i}";R.mkdir();sp.run(["tar","-C",str(R),"-xf",str(lay)],check=True)
    baked.append(run({a:R/c.lstrip("/") for a,_,c in L}));print("baked",i,{k:round(baked[-1][k],2) for k in (*P,"new_files")},flush=True)
rep={"cold":cold,"baked":baked,"summary":{"cold":summ(cold),"baked":summ(baked)},"layer":{"bytes":lay.stat().st_size,"sha256":dg,"pack_s":ps,"caches_files_bytes":per}}
out.mkdir(parents=True,exist_ok=True);(out/"cache_gpu.json").write_text(json.dumps(rep,indent=1))
for k in (*P,"new_files"):
    c,b=rep["summary"]["cold"][k],rep["summary"]["baked"][k]
    print(f"{k:<16} cold {c['median']:8.2f} ({c['min']:.2f}..{c['max']:.2f})  baked {b['median']:8.2f} ({b['min']:.2f}..{b['max']:.2f})")
print(cold[0]["v"])
