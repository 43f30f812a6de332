# ruff: noqa
# fmt: off
# What ran on the H200 (see README.md here); these two header lines were added after the run.
import json,time
t0=time.perf_counter()
import torch,triton,triton.language as tl
F=torch.nn.functional;ti=time.perf_counter()
@triton.jit
def add(x,y,o,n,B:tl.constexpr):
    p=tl.program_id(0)*B+tl.arange(0,B);m=p<n;tl.store(o+p,tl.load(x+p,mask=m)+tl.load(y+p,mask=m),mask=m)
@triton.jit
def smax(x,o,c,B:tl.constexpr):
    r=tl.program_id(0);p=tl.arange(0,B);v=tl.load(x+r*c+p,mask=p<c,other=-float("inf")).to(tl.float32);v=tl.exp(v-tl.max(v,0))
    tl.store(o+r*c+p,(v/tl.sum(v,0)).to(o.dtype.element_ty),mask=p<c)
@triton.jit
def rms(x,w,o,c,B:tl.constexpr):
    r=tl.program_id(0);p=tl.arange(0,B);v=tl.load(x+r*c+p,mask=p<c,other=0.).to(tl.float32);g=tl.load(w+p,mask=p<c,other=0.).to(tl.float32)
    tl.store(o+r*c+p,(v*tl.rsqrt(tl.sum(v*v,0)/c+1e-6)*g).to(o.dtype.element_ty),mask=p<c)
@triton.autotune(configs=[triton.Config({"BM":a,"BN":b,"BK":k},num_warps=w,num_stages=3) for a,b,k,w in ((64,64,32,4),(128,64,32,4),(64,128,64,4),(128,128,64,8))],key=["M","N","K"])
@triton.jit
def mm(a,b,c,M,N,K,BM:tl.constexpr,BN:tl.constexpr,BK:tl.constexpr):
    rm=tl.program_id(0)*BM+tl.arange(0,BM);rn=tl.program_id(1)*BN+tl.arange(0,BN);rk=tl.arange(0,BK);acc=tl.zeros((BM,BN),dtype=tl.float32)
    for k in range(0,K,BK):
        acc+=tl.dot(tl.load(a+rm[:,None]*K+(k+rk)[None,:]),tl.load(b+(k+rk)[:,None]*N+rn[None,:]))
    tl.store(c+rm[:,None]*N+rn[None,:],acc.to(c.dtype.element_ty))
for dt in (torch.float16,torch.bfloat16):
    x=torch.randn(4096,device="cuda",dtype=dt);add[(4,)](x,x,torch.empty_like(x),4096,B=1024)
    m=torch.randn(64,1000,device="cuda",dtype=dt);o=torch.empty_like(m);smax[(64,)](m,o,1000,B=1024);rms[(64,)](m,m[0],o,1000,B=1024)
    a=torch.randn(512,512,device="cuda",dtype=dt);mm[lambda q:(512//q["BM"],512//q["BN"])](a,a,torch.empty_like(a),512,512,512)
torch.cuda.synchronize();tt=time.perf_counter()
class Blk(torch.nn.Module):
    def __init__(s,d=2048,h=16,f=5632):
        super().__init__();s.h=h;s.n1=torch.nn.RMSNorm(d);s.n2=torch.nn.RMSNorm(d);s.qkv=torch.nn.Linear(d,3*d,bias=False);s.o=torch.nn.Linear(d,d,bias=False);s.up=torch.nn.Linear(d,2*f,bias=False);s.dn=torch.nn.Linear(f,d,bias=False)
    def forward(s,x,cs,sn):
        b,t,d=x.shape;q,k,v=s.qkv(s.n1(x)).view(b,t,3,s.h,d//s.h).unbind(2)
        def rope(u):u1,u2=u.chunk(2,-1);return torch.cat((u1*cs-u2*sn,u2*cs+u1*sn),-1)
        q,k,v=(u.transpose(1,2) for u in (rope(q),rope(k),v));x=x+s.o(F.scaled_dot_product_attention(q,k,v,is_causal=True).transpose(1,2).reshape(b,t,d))
        g,u=s.up(s.n2(x)).chunk(2,-1);return x+s.dn(F.silu(g)*u)
ls=[Blk().to("cuda",torch.bfloat16).eval() for _ in range(4)]
def fw(x,cs,sn):
    for l in ls:x=l(x,cs,sn)
    return x
cf=torch.compile(fw);x=torch.randn(1,128,2048,device="cuda",dtype=torch.bfloat16)
an=torch.arange(128,device="cuda")[:,None]*torch.arange(64,device="cuda")[None,:]*1e-3;cs=an.cos()[None,:,None,:].bfloat16();sn=an.sin()[None,:,None,:].bfloat16()
with torch.no_grad():
    c0=time.perf_counter();cf(x,cs,sn);torch.cuda.synchronize();c1=time.perf_counter();cf(x,cs,sn);torch.cuda.synchronize();c2=time.perf_counter()
print("RESULT "+json.dumps({"import_s":ti-t0,"triton_s":tt-ti,"compile_first_s":c1-c0,"steady_s":c2-c1,"v":[torch.__version__,triton.__version__,torch.cuda.get_device_name()]}),flush=True)
