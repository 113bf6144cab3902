// The float64 transcendentals of the full-vocabulary metrics (num::FullVocabSums, ops.hpp), owned
// by rlparity like the float ones (libm_model.hpp), so that a KL's bits depend neither on the host's
// libm nor on the device's: glibc's exp and log (ARM optimized-routines, glibc >= 2.28) as their
// x86-64 FMA builds (__exp_fma, __log_fma) compute them, the algorithms of
// sysdeps/ieee754/dbl-64/e_exp.c and e_log.c with the data of e_exp_data.c and e_log_data.c:
//   exp: x = k ln2/128 + r, 2^(k/128) = scale * (1 + tail) from a 128-entry table, a degree-5
//        polynomial in r; |x| >= 512 rescales to stay clear of over/underflow (specialcase);
//   log: x = 2^k z, z in [OFF, 2 OFF), 128 subintervals with c near their centre, log1p(z/c - 1)
//        by a degree-6 polynomial plus log(c) + k ln2; x within about 1/16 of 1 by a degree-12
//        polynomial in x - 1 with an exact head.
// Which operations are fused is read from the FMA build's machine code (Debian glibc 2.36,
// objdump of libm.so.6): the compiler contracted a * b + c wherever the source allows, so every
// fma below stands for one there, and every separate multiply and add was separate there too.
// Tests hold both against the host's std::exp and std::log (dense samples, every negative float
// widened for exp in tests/slow, inputs where a fusion matters); errno and floating-point exception
// flags are not modelled. Some fusions are unobservable in practice: exp's k = round(x 128/ln 2)
// and its last polynomial step, and log's near-1 lo, gave no differing input in 4e8 random doubles
// (nor, for exp, in any negative float); they follow the machine code all the same.
#pragma once
#include <cstddef>
#include <cstdint>

#include "rlparity/numerics/host_device.hpp"
#include "rlparity/numerics/libm_model.hpp"

namespace rlp::num {
namespace libm_detail {

// e_exp_data.c: tab[2k] = bits(T[k]), tab[2k+1] = bits(H[k]) - (k << 52)/128, with
// 2^(k/128) ~= H[k] * (1 + T[k]).
#define RLP_EXP_TABLE                                                                             \
  0x0000000000000000ull, 0x3ff0000000000000ull, 0x3c9b3b4f1a88bf6eull, 0x3feff63da9fb3335ull,     \
      0xbc7160139cd8dc5dull, 0x3fefec9a3e778061ull, 0xbc905e7a108766d1ull, 0x3fefe315e86e7f85ull, \
      0x3c8cd2523567f613ull, 0x3fefd9b0d3158574ull, 0xbc8bce8023f98efaull, 0x3fefd06b29ddf6deull, \
      0x3c60f74e61e6c861ull, 0x3fefc74518759bc8ull, 0x3c90a3e45b33d399ull, 0x3fefbe3ecac6f383ull, \
      0x3c979aa65d837b6dull, 0x3fefb5586cf9890full, 0x3c8eb51a92fdeffcull, 0x3fefac922b7247f7ull, \
      0x3c3ebe3d702f9cd1ull, 0x3fefa3ec32d3d1a2ull, 0xbc6a033489906e0bull, 0x3fef9b66affed31bull, \
      0xbc9556522a2fbd0eull, 0x3fef9301d0125b51ull, 0xbc5080ef8c4eea55ull, 0x3fef8abdc06c31ccull, \
      0xbc91c923b9d5f416ull, 0x3fef829aaea92de0ull, 0x3c80d3e3e95c55afull, 0x3fef7a98c8a58e51ull, \
      0xbc801b15eaa59348ull, 0x3fef72b83c7d517bull, 0xbc8f1ff055de323dull, 0x3fef6af9388c8deaull, \
      0x3c8b898c3f1353bfull, 0x3fef635beb6fcb75ull, 0xbc96d99c7611eb26ull, 0x3fef5be084045cd4ull, \
      0x3c9aecf73e3a2f60ull, 0x3fef54873168b9aaull, 0xbc8fe782cb86389dull, 0x3fef4d5022fcd91dull, \
      0x3c8a6f4144a6c38dull, 0x3fef463b88628cd6ull, 0x3c807a05b0e4047dull, 0x3fef3f49917ddc96ull, \
      0x3c968efde3a8a894ull, 0x3fef387a6e756238ull, 0x3c875e18f274487dull, 0x3fef31ce4fb2a63full, \
      0x3c80472b981fe7f2ull, 0x3fef2b4565e27cddull, 0xbc96b87b3f71085eull, 0x3fef24dfe1f56381ull, \
      0x3c82f7e16d09ab31ull, 0x3fef1e9df51fdee1ull, 0xbc3d219b1a6fbffaull, 0x3fef187fd0dad990ull, \
      0x3c8b3782720c0ab4ull, 0x3fef1285a6e4030bull, 0x3c6e149289cecb8full, 0x3fef0cafa93e2f56ull, \
      0x3c834d754db0abb6ull, 0x3fef06fe0a31b715ull, 0x3c864201e2ac744cull, 0x3fef0170fc4cd831ull, \
      0x3c8fdd395dd3f84aull, 0x3feefc08b26416ffull, 0xbc86a3803b8e5b04ull, 0x3feef6c55f929ff1ull, \
      0xbc924aedcc4b5068ull, 0x3feef1a7373aa9cbull, 0xbc9907f81b512d8eull, 0x3feeecae6d05d866ull, \
      0xbc71d1e83e9436d2ull, 0x3feee7db34e59ff7ull, 0xbc991919b3ce1b15ull, 0x3feee32dc313a8e5ull, \
      0x3c859f48a72a4c6dull, 0x3feedea64c123422ull, 0xbc9312607a28698aull, 0x3feeda4504ac801cull, \
      0xbc58a78f4817895bull, 0x3feed60a21f72e2aull, 0xbc7c2c9b67499a1bull, 0x3feed1f5d950a897ull, \
      0x3c4363ed60c2ac11ull, 0x3feece086061892dull, 0x3c9666093b0664efull, 0x3feeca41ed1d0057ull, \
      0x3c6ecce1daa10379ull, 0x3feec6a2b5c13cd0ull, 0x3c93ff8e3f0f1230ull, 0x3feec32af0d7d3deull, \
      0x3c7690cebb7aafb0ull, 0x3feebfdad5362a27ull, 0x3c931dbdeb54e077ull, 0x3feebcb299fddd0dull, \
      0xbc8f94340071a38eull, 0x3feeb9b2769d2ca7ull, 0xbc87deccdc93a349ull, 0x3feeb6daa2cf6642ull, \
      0xbc78dec6bd0f385full, 0x3feeb42b569d4f82ull, 0xbc861246ec7b5cf6ull, 0x3feeb1a4ca5d920full, \
      0x3c93350518fdd78eull, 0x3feeaf4736b527daull, 0x3c7b98b72f8a9b05ull, 0x3feead12d497c7fdull, \
      0x3c9063e1e21c5409ull, 0x3feeab07dd485429ull, 0x3c34c7855019c6eaull, 0x3feea9268a5946b7ull, \
      0x3c9432e62b64c035ull, 0x3feea76f15ad2148ull, 0xbc8ce44a6199769full, 0x3feea5e1b976dc09ull, \
      0xbc8c33c53bef4da8ull, 0x3feea47eb03a5585ull, 0xbc845378892be9aeull, 0x3feea34634ccc320ull, \
      0xbc93cedd78565858ull, 0x3feea23882552225ull, 0x3c5710aa807e1964ull, 0x3feea155d44ca973ull, \
      0xbc93b3efbf5e2228ull, 0x3feea09e667f3bcdull, 0xbc6a12ad8734b982ull, 0x3feea012750bdabfull, \
      0xbc6367efb86da9eeull, 0x3fee9fb23c651a2full, 0xbc80dc3d54e08851ull, 0x3fee9f7df9519484ull, \
      0xbc781f647e5a3ecfull, 0x3fee9f75e8ec5f74ull, 0xbc86ee4ac08b7db0ull, 0x3fee9f9a48a58174ull, \
      0xbc8619321e55e68aull, 0x3fee9feb564267c9ull, 0x3c909ccb5e09d4d3ull, 0x3feea0694fde5d3full, \
      0xbc7b32dcb94da51dull, 0x3feea11473eb0187ull, 0x3c94ecfd5467c06bull, 0x3feea1ed0130c132ull, \
      0x3c65ebe1abd66c55ull, 0x3feea2f336cf4e62ull, 0xbc88a1c52fb3cf42ull, 0x3feea427543e1a12ull, \
      0xbc9369b6f13b3734ull, 0x3feea589994cce13ull, 0xbc805e843a19ff1eull, 0x3feea71a4623c7adull, \
      0xbc94d450d872576eull, 0x3feea8d99b4492edull, 0x3c90ad675b0e8a00ull, 0x3feeaac7d98a6699ull, \
      0x3c8db72fc1f0eab4ull, 0x3feeace5422aa0dbull, 0xbc65b6609cc5e7ffull, 0x3feeaf3216b5448cull, \
      0x3c7bf68359f35f44ull, 0x3feeb1ae99157736ull, 0xbc93091fa71e3d83ull, 0x3feeb45b0b91ffc6ull, \
      0xbc5da9b88b6c1e29ull, 0x3feeb737b0cdc5e5ull, 0xbc6c23f97c90b959ull, 0x3feeba44cbc8520full, \
      0xbc92434322f4f9aaull, 0x3feebd829fde4e50ull, 0xbc85ca6cd7668e4bull, 0x3feec0f170ca07baull, \
      0x3c71affc2b91ce27ull, 0x3feec49182a3f090ull, 0x3c6dd235e10a73bbull, 0x3feec86319e32323ull, \
      0xbc87c50422622263ull, 0x3feecc667b5de565ull, 0x3c8b1c86e3e231d5ull, 0x3feed09bec4a2d33ull, \
      0xbc91bbd1d3bcbb15ull, 0x3feed503b23e255dull, 0x3c90cc319cee31d2ull, 0x3feed99e1330b358ull, \
      0x3c8469846e735ab3ull, 0x3feede6b5579fdbfull, 0xbc82dfcd978e9db4ull, 0x3feee36bbfd3f37aull, \
      0x3c8c1a7792cb3387ull, 0x3feee89f995ad3adull, 0xbc907b8f4ad1d9faull, 0x3feeee07298db666ull, \
      0xbc55c3d956dcaebaull, 0x3feef3a2b84f15fbull, 0xbc90a40e3da6f640ull, 0x3feef9728de5593aull, \
      0xbc68d6f438ad9334ull, 0x3feeff76f2fb5e47ull, 0xbc91eee26b588a35ull, 0x3fef05b030a1064aull, \
      0x3c74ffd70a5fddcdull, 0x3fef0c1e904bc1d2ull, 0xbc91bdfbfa9298acull, 0x3fef12c25bd71e09ull, \
      0x3c736eae30af0cb3ull, 0x3fef199bdd85529cull, 0x3c8ee3325c9ffd94ull, 0x3fef20ab5fffd07aull, \
      0x3c84e08fd10959acull, 0x3fef27f12e57d14bull, 0x3c63cdaf384e1a67ull, 0x3fef2f6d9406e7b5ull, \
      0x3c676b2c6c921968ull, 0x3fef3720dcef9069ull, 0xbc808a1883ccb5d2ull, 0x3fef3f0b555dc3faull, \
      0xbc8fad5d3ffffa6full, 0x3fef472d4a07897cull, 0xbc900dae3875a949ull, 0x3fef4f87080d89f2ull, \
      0x3c74a385a63d07a7ull, 0x3fef5818dcfba487ull, 0xbc82919e2040220full, 0x3fef60e316c98398ull, \
      0x3c8e5a50d5c192acull, 0x3fef69e603db3285ull, 0x3c843a59ac016b4bull, 0x3fef7321f301b460ull, \
      0xbc82d52107b43e1full, 0x3fef7c97337b9b5full, 0xbc892ab93b470dc9ull, 0x3fef864614f5a129ull, \
      0x3c74b604603a88d3ull, 0x3fef902ee78b3ff6ull, 0x3c83c5ec519d7271ull, 0x3fef9a51fbc74c83ull, \
      0xbc8ff7128fd391f0ull, 0x3fefa4afa2a490daull, 0xbc8dae98e223747dull, 0x3fefaf482d8e67f1ull, \
      0x3c8ec3bc41aa2008ull, 0x3fefba1bee615a27ull, 0x3c842b94c3a9eb32ull, 0x3fefc52b376bba97ull, \
      0x3c8a64a931d185eeull, 0x3fefd0765b6e4540ull, 0xbc8e37bae43be3edull, 0x3fefdbfdad9cbe14ull, \
      0x3c77893b4d91cd9dull, 0x3fefe7c1819e90d8ull, 0x3c5305c14160cc89ull, 0x3feff3c22b8f71f1ull
// e_log_data.c (the FMA build reads tab, never tab2): invc = 1/c and logc = log(c) of each
// subinterval, interleaved.
#define RLP_LOG_TABLE                                                                           \
  0x1.734f0c3e0de9fp+0, -0x1.7cc7f79e69000p-2, 0x1.713786a2ce91fp+0, -0x1.76feec20d0000p-2,     \
      0x1.6f26008fab5a0p+0, -0x1.713e31351e000p-2, 0x1.6d1a61f138c7dp+0, -0x1.6b85b38287800p-2, \
      0x1.6b1490bc5b4d1p+0, -0x1.65d5590807800p-2, 0x1.69147332f0cbap+0, -0x1.602d076180000p-2, \
      0x1.6719f18224223p+0, -0x1.5a8ca86909000p-2, 0x1.6524f99a51ed9p+0, -0x1.54f4356035000p-2, \
      0x1.63356aa8f24c4p+0, -0x1.4f637c36b4000p-2, 0x1.614b36b9ddc14p+0, -0x1.49da7fda85000p-2, \
      0x1.5f66452c65c4cp+0, -0x1.445923989a800p-2, 0x1.5d867b5912c4fp+0, -0x1.3edf439b0b800p-2, \
      0x1.5babccb5b90dep+0, -0x1.396ce448f7000p-2, 0x1.59d61f2d91a78p+0, -0x1.3401e17bda000p-2, \
      0x1.5805612465687p+0, -0x1.2e9e2ef468000p-2, 0x1.56397cee76bd3p+0, -0x1.2941b3830e000p-2, \
      0x1.54725e2a77f93p+0, -0x1.23ec58cda8800p-2, 0x1.52aff42064583p+0, -0x1.1e9e129279000p-2, \
      0x1.50f22dbb2bddfp+0, -0x1.1956d2b48f800p-2, 0x1.4f38f4734ded7p+0, -0x1.141679ab9f800p-2, \
      0x1.4d843cfde2840p+0, -0x1.0edd094ef9800p-2, 0x1.4bd3ec078a3c8p+0, -0x1.09aa518db1000p-2, \
      0x1.4a27fc3e0258ap+0, -0x1.047e65263b800p-2, 0x1.4880524d48434p+0, -0x1.feb224586f000p-3, \
      0x1.46dce1b192d0bp+0, -0x1.f474a7517b000p-3, 0x1.453d9d3391854p+0, -0x1.ea4443d103000p-3, \
      0x1.43a2744b4845ap+0, -0x1.e020d44e9b000p-3, 0x1.420b54115f8fbp+0, -0x1.d60a22977f000p-3, \
      0x1.40782da3ef4b1p+0, -0x1.cc00104959000p-3, 0x1.3ee8f5d57fe8fp+0, -0x1.c202956891000p-3, \
      0x1.3d5d9a00b4ce9p+0, -0x1.b81178d811000p-3, 0x1.3bd60c010c12bp+0, -0x1.ae2c9ccd3d000p-3, \
      0x1.3a5242b75dab8p+0, -0x1.a45402e129000p-3, 0x1.38d22cd9fd002p+0, -0x1.9a877681df000p-3, \
      0x1.3755bc5847a1cp+0, -0x1.90c6d69483000p-3, 0x1.35dce49ad36e2p+0, -0x1.87120a645c000p-3, \
      0x1.34679984dd440p+0, -0x1.7d68fb4143000p-3, 0x1.32f5cceffcb24p+0, -0x1.73cb83c627000p-3, \
      0x1.3187775a10d49p+0, -0x1.6a39a9b376000p-3, 0x1.301c8373e3990p+0, -0x1.60b3154b7a000p-3, \
      0x1.2eb4ebb95f841p+0, -0x1.5737d76243000p-3, 0x1.2d50a0219a9d1p+0, -0x1.4dc7b8fc23000p-3, \
      0x1.2bef9a8b7fd2ap+0, -0x1.4462c51d20000p-3, 0x1.2a91c7a0c1babp+0, -0x1.3b08abc830000p-3, \
      0x1.293726014b530p+0, -0x1.31b996b490000p-3, 0x1.27dfa5757a1f5p+0, -0x1.2875490a44000p-3, \
      0x1.268b39b1d3bbfp+0, -0x1.1f3b9f879a000p-3, 0x1.2539d838ff5bdp+0, -0x1.160c8252ca000p-3, \
      0x1.23eb7aac9083bp+0, -0x1.0ce7f57f72000p-3, 0x1.22a012ba940b6p+0, -0x1.03cdc49fea000p-3, \
      0x1.2157996cc4132p+0, -0x1.f57bdbc4b8000p-4, 0x1.201201dd2fc9bp+0, -0x1.e370896404000p-4, \
      0x1.1ecf4494d480bp+0, -0x1.d17983ef94000p-4, 0x1.1d8f5528f6569p+0, -0x1.bf9674ed8a000p-4, \
      0x1.1c52311577e7cp+0, -0x1.adc79202f6000p-4, 0x1.1b17c74cb26e9p+0, -0x1.9c0c3e7288000p-4, \
      0x1.19e010c2c1ab6p+0, -0x1.8a646b372c000p-4, 0x1.18ab07bb670bdp+0, -0x1.78d01b3ac0000p-4, \
      0x1.1778a25efbcb6p+0, -0x1.674f145380000p-4, 0x1.1648d354c31dap+0, -0x1.55e0e6d878000p-4, \
      0x1.151b990275fddp+0, -0x1.4485cdea1e000p-4, 0x1.13f0ea432d24cp+0, -0x1.333d94d6aa000p-4, \
      0x1.12c8b7210f9dap+0, -0x1.22079f8c56000p-4, 0x1.11a3028ecb531p+0, -0x1.10e4698622000p-4, \
      0x1.107fbda8434afp+0, -0x1.ffa6c6ad20000p-5, 0x1.0f5ee0f4e6bb3p+0, -0x1.dda8d4a774000p-5, \
      0x1.0e4065d2a9fcep+0, -0x1.bbcece4850000p-5, 0x1.0d244632ca521p+0, -0x1.9a1894012c000p-5, \
      0x1.0c0a77ce2981ap+0, -0x1.788583302c000p-5, 0x1.0af2f83c636d1p+0, -0x1.5715e67d68000p-5, \
      0x1.09ddb98a01339p+0, -0x1.35c8a49658000p-5, 0x1.08cabaf52e7dfp+0, -0x1.149e364154000p-5, \
      0x1.07b9f2f4e28fbp+0, -0x1.e72c082eb8000p-6, 0x1.06ab58c358f19p+0, -0x1.a55f152528000p-6, \
      0x1.059eea5ecf92cp+0, -0x1.63d62cf818000p-6, 0x1.04949cdd12c90p+0, -0x1.228fb8caa0000p-6, \
      0x1.038c6c6f0ada9p+0, -0x1.c317b20f90000p-7, 0x1.02865137932a9p+0, -0x1.419355daa0000p-7, \
      0x1.0182427ea7348p+0, -0x1.81203c2ec0000p-8, 0x1.008040614b195p+0, -0x1.0040979240000p-9, \
      0x1.fe01ff726fa1ap-1, 0x1.feff384900000p-9, 0x1.fa11cc261ea74p-1, 0x1.7dc41353d0000p-7,   \
      0x1.f6310b081992ep-1, 0x1.3cea3c4c28000p-6, 0x1.f25f63ceeadcdp-1, 0x1.b9fc114890000p-6,   \
      0x1.ee9c8039113e7p-1, 0x1.1b0d8ce110000p-5, 0x1.eae8078cbb1abp-1, 0x1.58a5bd001c000p-5,   \
      0x1.e741aa29d0c9bp-1, 0x1.95c8340d88000p-5, 0x1.e3a91830a99b5p-1, 0x1.d276aef578000p-5,   \
      0x1.e01e009609a56p-1, 0x1.07598e598c000p-4, 0x1.dca01e577bb98p-1, 0x1.253f5e30d2000p-4,   \
      0x1.d92f20b7c9103p-1, 0x1.42edd8b380000p-4, 0x1.d5cac66fb5ccep-1, 0x1.606598757c000p-4,   \
      0x1.d272caa5ede9dp-1, 0x1.7da76356a0000p-4, 0x1.cf26e3e6b2ccdp-1, 0x1.9ab434e1c6000p-4,   \
      0x1.cbe6da2a77902p-1, 0x1.b78c7bb0d6000p-4, 0x1.c8b266d37086dp-1, 0x1.d431332e72000p-4,   \
      0x1.c5894bd5d5804p-1, 0x1.f0a3171de6000p-4, 0x1.c26b533bb9f8cp-1, 0x1.067152b914000p-3,   \
      0x1.bf583eeece73fp-1, 0x1.147858292b000p-3, 0x1.bc4fd75db96c1p-1, 0x1.2266ecdca3000p-3,   \
      0x1.b951e0c864a28p-1, 0x1.303d7a6c55000p-3, 0x1.b65e2c5ef3e2cp-1, 0x1.3dfc33c331000p-3,   \
      0x1.b374867c9888bp-1, 0x1.4ba366b7a8000p-3, 0x1.b094b211d304ap-1, 0x1.5933928d1f000p-3,   \
      0x1.adbe885f2ef7ep-1, 0x1.66acd2418f000p-3, 0x1.aaf1d31603da2p-1, 0x1.740f8ec669000p-3,   \
      0x1.a82e63fd358a7p-1, 0x1.815c0f51af000p-3, 0x1.a5740ef09738bp-1, 0x1.8e92954f68000p-3,   \
      0x1.a2c2a90ab4b27p-1, 0x1.9bb3602f84000p-3, 0x1.a01a01393f2d1p-1, 0x1.a8bed1c2c0000p-3,   \
      0x1.9d79f24db3c1bp-1, 0x1.b5b515c01d000p-3, 0x1.9ae2505c7b190p-1, 0x1.c2967ccbcc000p-3,   \
      0x1.9852ef297ce2fp-1, 0x1.cf635d5486000p-3, 0x1.95cbaeea44b75p-1, 0x1.dc1bd3446c000p-3,   \
      0x1.934c69de74838p-1, 0x1.e8c01b8cfe000p-3, 0x1.90d4f2f6752e6p-1, 0x1.f5509c0179000p-3,   \
      0x1.8e6528effd79dp-1, 0x1.00e6c121fb800p-2, 0x1.8bfce9fcc007cp-1, 0x1.071b80e93d000p-2,   \
      0x1.899c0dabec30ep-1, 0x1.0d46b9e867000p-2, 0x1.87427aa2317fbp-1, 0x1.13687334bd000p-2,   \
      0x1.84f00acb39a08p-1, 0x1.1980d67234800p-2, 0x1.82a49e8653e55p-1, 0x1.1f8ffe0cc8000p-2,   \
      0x1.8060195f40260p-1, 0x1.2595fd7636800p-2, 0x1.7e22563e0a329p-1, 0x1.2b9300914a800p-2,   \
      0x1.7beb377dcb5adp-1, 0x1.3187210436000p-2, 0x1.79baa679725c2p-1, 0x1.377266dec1800p-2,   \
      0x1.77907f2170657p-1, 0x1.3d54ffbaf3000p-2, 0x1.756cadbd6130cp-1, 0x1.432eee32fe000p-2

// One copy for the host, one in the device's constant memory (per translation unit).
static constexpr uint64_t kExpTab[256] = {RLP_EXP_TABLE};
static constexpr double kLogTab[256] = {RLP_LOG_TABLE};
#if defined(__CUDACC__)
static __constant__ uint64_t kExpTabDev[256] = {RLP_EXP_TABLE};
static __constant__ double kLogTabDev[256] = {RLP_LOG_TABLE};
#endif
#undef RLP_EXP_TABLE
#undef RLP_LOG_TABLE

#if defined(__CUDA_ARCH__)
RLP_HD uint64_t exp_tab(uint64_t i) { return kExpTabDev[i]; }
RLP_HD double log_tab(uint64_t i) { return kLogTabDev[i]; }
#else
RLP_HD uint64_t exp_tab(uint64_t i) { return kExpTab[i]; }
RLP_HD double log_tab(uint64_t i) { return kLogTab[i]; }
#endif

// e_exp_data.c's scalars: 128/ln 2, -ln 2/128 in two parts, the rounding shift, C2..C5.
constexpr double kExpInvLn2N = 0x1.71547652b82fep+7, kExpNegLn2hiN = -0x1.62e42fefa0000p-8,
                 kExpNegLn2loN = -0x1.cf79abc9e3b3ap-47, kExpShift = 0x1.8p+52;
constexpr double kExpC2 = 0x1.ffffffffffdbdp-2, kExpC3 = 0x1.555555555543cp-3, kExpC4 = 0x1.55555cf172b91p-5,
                 kExpC5 = 0x1.1111167a4d017p-7;
// e_log_data.c's scalars: ln 2 in two parts, A (poly, degree 2..6) and B (poly1, degree 2..12).
constexpr double kLogLn2hi = 0x1.62e42fefa3800p-1, kLogLn2lo = 0x1.ef35793c76730p-45;
// (Scalars, not arrays: a constexpr array is not readable in device code.)
constexpr double kLogA0 = -0x1.0000000000001p-1, kLogA1 = 0x1.555555551305bp-2,
                 kLogA2 = -0x1.fffffffeb4590p-3, kLogA3 = 0x1.999b324f10111p-3,
                 kLogA4 = -0x1.55575e506c89fp-3;
constexpr double kLogB0 = -0x1.0000000000000p-1, kLogB1 = 0x1.5555555555577p-2,
                 kLogB2 = -0x1.ffffffffffdcbp-3, kLogB3 = 0x1.999999995dd0cp-3,
                 kLogB4 = -0x1.55555556745a7p-3, kLogB5 = 0x1.24924a344de30p-3,
                 kLogB6 = -0x1.fffffa4423d65p-4, kLogB7 = 0x1.c7184282ad6cap-4,
                 kLogB8 = -0x1.999eb43b068ffp-4, kLogB9 = 0x1.78182f7afd085p-4,
                 kLogB10 = -0x1.5521375d145cdp-4;
constexpr uint64_t kLogOff = 0x3fe6000000000000ull;
// log's near-1 range: bits(1 - 2^-4) <= bits(x) < bits(1 + 0x1.09p-4).
constexpr uint64_t kLogNearLo = 0x3fee000000000000ull, kLogNearHi = 0x3ff1090000000000ull;
// The main paths' ranges, shared by the scalar models and their lanes: exp's |x| in [2^-54, 512) by
// its top 12 bits; log's positive normal finite x by its top 16 bits.
constexpr uint32_t kExpMainTopLo = 0x3c9u, kExpMainTopHi = 0x408u;
constexpr uint32_t kLogMainTopLo = 0x0010u, kLogMainTopHi = 0x7ff0u;

// exp's polynomial: tail + r + r^2 (C2 + r C3) + r^4 (C4 + r C5), fused as the FMA build does.
RLP_HD double exp_poly(double r, double tail) {
  const double r2 = r * r;
  const double lo = fma_d(fma_d(r, kExpC3, kExpC2), r2, tail + r);
  return fma_d(r2 * r2, fma_d(r, kExpC5, kExpC4), lo);
}

// |x| in [512, 1024): scale * (1 + tmp) without intermediate over/underflow (specialcase).
RLP_HD double exp_rescaled(double tmp, uint64_t sbits, uint64_t ki) {
  if ((ki & 0x80000000u) == 0) {  // k > 0: the scale's exponent may have overflowed
    const double scale = bits_f64(sbits - (uint64_t{1009} << 52));
    return 0x1p1009 * fma_d(scale, tmp, scale);
  }
  const double scale = bits_f64(sbits + (uint64_t{1022} << 52));
  const double st = scale * tmp;
  double y = scale + st;
  if (y < 1.0) {  // round to the subnormal grid once (hi + lo), not twice
    double lo = scale - y + st;
    const double hi = 1.0 + y;
    lo = 1.0 - hi + y + lo;
    y = (lo + hi) - 1.0;
    if (y == 0.0) y = 0.0;  // no -0
  }
  return 0x1p-1022 * y;
}

// log's near-1 case: r = x - 1, log1p(r) = r - r^2/2 + r^3 B(r), the head r - rhi^2/2 exact.
RLP_HD double log_near_one(double x) {
  const double r = x - 1.0, r2 = r * r, r3 = r * r2;
  const double a = fma_d(r2, kLogB3, fma_d(r, kLogB2, kLogB1));
  const double b = fma_d(r2, kLogB6, fma_d(r, kLogB5, kLogB4));
  const double c = fma_d(r3, kLogB10, fma_d(r2, kLogB9, fma_d(r, kLogB8, kLogB7)));
  const double poly = fma_d(fma_d(c, r3, b), r3, a);
  const double w = r * 0x1p27;  // rhi: r's top 26 bits, so rhi * rhi is exact
  const double rhi = r + w - w, rlo = r - rhi;
  const double rhi2 = rhi * rhi;
  const double hi = fma_d(rhi2, kLogB0, r);
  double lo = fma_d(rhi2, kLogB0, r - hi);
  lo = fma_d(kLogB0 * rlo, rhi + r, lo);
  return hi + fma_d(poly, r3, lo);
}

// log of a positive normal x outside the near-1 range: the table path.
RLP_HD double log_table_path(uint64_t ix) {
  const uint64_t tmp = ix - kLogOff;
  const uint64_t i = (tmp >> 45) % 128;
  const double kd = static_cast<double>(static_cast<int64_t>(tmp) >> 52);  // arithmetic shift
  const double z = bits_f64(ix - (tmp & (uint64_t{0xfff} << 52)));
  const double invc = log_tab(2 * i), logc = log_tab(2 * i + 1);
  const double r = fma_d(z, invc, -1.0);
  const double w = fma_d(kd, kLogLn2hi, logc);
  const double hi = w + r;
  double lo = fma_d(kd, kLogLn2lo, w - hi + r);
  const double r2 = r * r, r3 = r * r2;
  lo = fma_d(r2, kLogA0, lo);
  const double q = fma_d(fma_d(r, kLogA4, kLogA3), r2, fma_d(r, kLogA2, kLogA1));
  return fma_d(r3, q, lo) + hi;
}

}  // namespace libm_detail

// glibc's exp of a double.
RLP_HD double exp_model(double x) {
  using namespace libm_detail;
  const uint64_t ux = f64_bits(x);
  const uint32_t abstop = static_cast<uint32_t>(ux >> 52) & 0x7ffu;
  bool rescale = false;
  if (abstop - kExpMainTopLo >= kExpMainTopHi - kExpMainTopLo) {  // |x| < 2^-54 or |x| >= 512 (or inf, NaN)
    if (abstop - kExpMainTopLo >= 0x80000000u) return 1.0 + x;    // |x| < 2^-54
    if (abstop > kExpMainTopHi) {                                 // |x| >= 1024
      if (ux == 0xfff0000000000000ull) return 0.0;
      if (abstop >= 0x7ffu) return 1.0 + x;                       // inf, NaN
      return (ux >> 63) ? 0.0 : bits_f64(0x7ff0000000000000ull);  // underflow, overflow
    }
    rescale = true;
  }
  double kd = fma_d(x, kExpInvLn2N, kExpShift);  // k = round(x 128/ln 2) in the low bits
  const uint64_t ki = f64_bits(kd);
  kd -= kExpShift;
  const double r = fma_d(kd, kExpNegLn2loN, fma_d(kd, kExpNegLn2hiN, x));
  const uint64_t idx = 2 * (ki % 128);
  const uint64_t sbits = exp_tab(idx + 1) + (ki << 45);
  const double tmp = exp_poly(r, bits_f64(exp_tab(idx)));
  if (rescale) return exp_rescaled(tmp, sbits, ki);
  const double scale = bits_f64(sbits);
  return fma_d(scale, tmp, scale);
}

// glibc's log of a double.
RLP_HD double log_model(double x) {
  using namespace libm_detail;
  uint64_t ix = f64_bits(x);
  if (ix - kLogNearLo < kLogNearHi - kLogNearLo) return ix == 0x3ff0000000000000ull ? 0.0 : log_near_one(x);
  const uint32_t top = static_cast<uint32_t>(ix >> 48);
  if (top - kLogMainTopLo >= kLogMainTopHi - kLogMainTopLo) {  // subnormal, zero, negative, inf, NaN
    if (ix * 2 == 0) return -bits_f64(0x7ff0000000000000ull);  // -inf
    if (ix == 0x7ff0000000000000ull) return x;
    if ((top & 0x8000u) || (top & 0x7ff0u) == 0x7ff0u) {
      const double d = x - x;
      return d / d;
    }
    ix = f64_bits(x * 0x1p52) - (uint64_t{52} << 52);  // subnormal: normalize
  }
  return log_table_path(ix);
}

#if !defined(__CUDACC__)
// y[i] = exp_model(x[i]) and y[i] = log_model(x[i]) for i < n, the same bits, 8 lanes of the
// arithmetic at a time where the host has AVX-512 (a lane outside the main path runs the scalar
// model). y may be x. For the full-vocabulary metrics' loop.
void exp_model_n(const double* x, double* y, std::size_t n);
void log_model_n(const double* x, double* y, std::size_t n);
#endif

}  // namespace rlp::num
