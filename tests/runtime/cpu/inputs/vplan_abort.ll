; fusecc: loop-level kernels for the CPU

define void @"fused_0_reduction"(ptr noalias align 2 dereferenceable(28) %a0, ptr noalias align 64 dereferenceable(28) %a1, i64 %begin, i64 %end) #0 {
entry:
  %buf6 = alloca [7 x float], align 64
  br label %loop1
loop1:
  %i4 = phi i64 [ %begin, %entry ], [ %v189, %exit166 ]
  %v5 = icmp slt i64 %i4, %end
  br i1 %v5, label %body2, label %exit3
body2:
  call void @llvm.memset.p0.i64(ptr align 64 %buf6, i8 0, i64 28, i1 false)
  br label %loop7
loop7:
  %i10 = phi i64 [ 0, %body2 ], [ %v68, %body8 ]
  %c11 = phi float [ 0xFFF0000000000000, %body2 ], [ %v67, %body8 ]
  %v12 = icmp slt i64 %i10, 7
  br i1 %v12, label %body8, label %exit9
body8:
  %v13 = mul i64 %i4, 7
  %v14 = add i64 %v13, %i10
  %v15 = getelementptr inbounds i16, ptr %a0, i64 %v14
  %v16 = load i16, ptr %v15, align 2
  %v17 = zext i16 %v16 to i32
  %v18 = shl i32 %v17, 16
  %v19 = bitcast i32 %v18 to float
  %v20 = fdiv float %v19, 0x3FF6A09E60000000
  %v21 = call float @llvm.fabs.f32(float %v20)
  %v22 = fmul float %v20, %v20
  %v23 = call float @llvm.fmuladd.f32(float 0x3F149234E0000000, float %v22, float 0xBF4A3DC180000000)
  %v24 = call float @llvm.fmuladd.f32(float %v23, float %v22, float 0x3F75401DC0000000)
  %v25 = call float @llvm.fmuladd.f32(float %v24, float %v22, float 0xBF9B7F88C0000000)
  %v26 = call float @llvm.fmuladd.f32(float %v25, float %v22, float 0x3FBCE2CF00000000)
  %v27 = call float @llvm.fmuladd.f32(float %v26, float %v22, float 0xBFD81273E0000000)
  %v28 = call float @llvm.fmuladd.f32(float %v27, float %v22, float 0x3FF20DD740000000)
  %v29 = fmul float %v20, %v28
  %v30 = fcmp ogt float %v21, 0x400F9999A0000000
  %v31 = select i1 %v30, float 0x400F9999A0000000, float %v21
  %v32 = fsub float %v31, 0x4003CCCCC0000000
  %v33 = fmul float %v32, 0x3FE5B1E600000000
  %v34 = call float @llvm.fmuladd.f32(float 0xBEC01CB740000000, float %v33, float 0x3F0330D6C0000000)
  %v35 = call float @llvm.fmuladd.f32(float %v34, float %v33, float 0xBF2A8C8B00000000)
  %v36 = call float @llvm.fmuladd.f32(float %v35, float %v33, float 0x3F4AE2BAA0000000)
  %v37 = call float @llvm.fmuladd.f32(float %v36, float %v33, float 0xBF68BB96A0000000)
  %v38 = call float @llvm.fmuladd.f32(float %v37, float %v33, float 0x3F85818500000000)
  %v39 = call float @llvm.fmuladd.f32(float %v38, float %v33, float 0xBFA2335160000000)
  %v40 = call float @llvm.fmuladd.f32(float %v39, float %v33, float 0xC0006A05E0000000)
  %v41 = call float @llvm.fmuladd.f32(float %v40, float %v33, float 0xC01F4D6FE0000000)
  %v42 = call float @llvm.fmuladd.f32(float %v41, float %v33, float 0xC01EB1C100000000)
  %v43 = fmul float %v42, 0x3FF7154760000000
  %v44 = call float @llvm.rint.f32(float %v43)
  %v45 = call float @llvm.fmuladd.f32(float %v44, float 0xBFE6300000000000, float %v42)
  %v46 = call float @llvm.fmuladd.f32(float %v44, float 0x3F2BD01060000000, float %v45)
  %v47 = call float @llvm.fmuladd.f32(float 0x3F29FCAAE0000000, float %v46, float 0x3F56D96380000000)
  %v48 = call float @llvm.fmuladd.f32(float %v47, float %v46, float 0x3F81111E00000000)
  %v49 = call float @llvm.fmuladd.f32(float %v48, float %v46, float 0x3FA5554800000000)
  %v50 = call float @llvm.fmuladd.f32(float %v49, float %v46, float 0x3FC5555540000000)
  %v51 = call float @llvm.fmuladd.f32(float %v50, float %v46, float 0x3FE0000000000000)
  %v52 = fmul float %v46, %v46
  %v53 = call float @llvm.fmuladd.f32(float %v52, float %v51, float %v46)
  %v54 = fadd float %v53, 0x3FF0000000000000
  %v55 = fptosi float %v44 to i32
  %v56 = add i32 %v55, 127
  %v57 = shl i32 %v56, 23
  %v58 = bitcast i32 %v57 to float
  %v59 = fmul float %v54, %v58
  %v60 = fsub float 0x3FF0000000000000, %v59
  %v61 = call float @llvm.copysign.f32(float %v60, float %v20)
  %v62 = fcmp olt float %v21, 0x3FF0000000000000
  %v63 = select i1 %v62, float %v29, float %v61
  %v64 = fmul float 0x3FE0000000000000, %v19
  %v65 = fadd float 0x3FF0000000000000, %v63
  %v66 = fmul float %v64, %v65
  %v67 = call float @llvm.maxnum.f32(float %c11, float %v66)
  %v68 = add nsw i64 %i10, 1
  br label %loop7
exit9:
  br label %loop69
loop69:
  %i72 = phi i64 [ 0, %exit9 ], [ %v163, %body70 ]
  %c73 = phi float [ 0x0000000000000000, %exit9 ], [ %v162, %body70 ]
  %v74 = icmp slt i64 %i72, 7
  br i1 %v74, label %body70, label %exit71
body70:
  %v75 = mul i64 %i4, 7
  %v76 = add i64 %v75, %i72
  %v77 = getelementptr inbounds i16, ptr %a0, i64 %v76
  %v78 = load i16, ptr %v77, align 2
  %v79 = zext i16 %v78 to i32
  %v80 = shl i32 %v79, 16
  %v81 = bitcast i32 %v80 to float
  %v82 = fdiv float %v81, 0x3FF6A09E60000000
  %v83 = call float @llvm.fabs.f32(float %v82)
  %v84 = fmul float %v82, %v82
  %v85 = call float @llvm.fmuladd.f32(float 0x3F149234E0000000, float %v84, float 0xBF4A3DC180000000)
  %v86 = call float @llvm.fmuladd.f32(float %v85, float %v84, float 0x3F75401DC0000000)
  %v87 = call float @llvm.fmuladd.f32(float %v86, float %v84, float 0xBF9B7F88C0000000)
  %v88 = call float @llvm.fmuladd.f32(float %v87, float %v84, float 0x3FBCE2CF00000000)
  %v89 = call float @llvm.fmuladd.f32(float %v88, float %v84, float 0xBFD81273E0000000)
  %v90 = call float @llvm.fmuladd.f32(float %v89, float %v84, float 0x3FF20DD740000000)
  %v91 = fmul float %v82, %v90
  %v92 = fcmp ogt float %v83, 0x400F9999A0000000
  %v93 = select i1 %v92, float 0x400F9999A0000000, float %v83
  %v94 = fsub float %v93, 0x4003CCCCC0000000
  %v95 = fmul float %v94, 0x3FE5B1E600000000
  %v96 = call float @llvm.fmuladd.f32(float 0xBEC01CB740000000, float %v95, float 0x3F0330D6C0000000)
  %v97 = call float @llvm.fmuladd.f32(float %v96, float %v95, float 0xBF2A8C8B00000000)
  %v98 = call float @llvm.fmuladd.f32(float %v97, float %v95, float 0x3F4AE2BAA0000000)
  %v99 = call float @llvm.fmuladd.f32(float %v98, float %v95, float 0xBF68BB96A0000000)
  %v100 = call float @llvm.fmuladd.f32(float %v99, float %v95, float 0x3F85818500000000)
  %v101 = call float @llvm.fmuladd.f32(float %v100, float %v95, float 0xBFA2335160000000)
  %v102 = call float @llvm.fmuladd.f32(float %v101, float %v95, float 0xC0006A05E0000000)
  %v103 = call float @llvm.fmuladd.f32(float %v102, float %v95, float 0xC01F4D6FE0000000)
  %v104 = call float @llvm.fmuladd.f32(float %v103, float %v95, float 0xC01EB1C100000000)
  %v105 = fmul float %v104, 0x3FF7154760000000
  %v106 = call float @llvm.rint.f32(float %v105)
  %v107 = call float @llvm.fmuladd.f32(float %v106, float 0xBFE6300000000000, float %v104)
  %v108 = call float @llvm.fmuladd.f32(float %v106, float 0x3F2BD01060000000, float %v107)
  %v109 = call float @llvm.fmuladd.f32(float 0x3F29FCAAE0000000, float %v108, float 0x3F56D96380000000)
  %v110 = call float @llvm.fmuladd.f32(float %v109, float %v108, float 0x3F81111E00000000)
  %v111 = call float @llvm.fmuladd.f32(float %v110, float %v108, float 0x3FA5554800000000)
  %v112 = call float @llvm.fmuladd.f32(float %v111, float %v108, float 0x3FC5555540000000)
  %v113 = call float @llvm.fmuladd.f32(float %v112, float %v108, float 0x3FE0000000000000)
  %v114 = fmul float %v108, %v108
  %v115 = call float @llvm.fmuladd.f32(float %v114, float %v113, float %v108)
  %v116 = fadd float %v115, 0x3FF0000000000000
  %v117 = fptosi float %v106 to i32
  %v118 = add i32 %v117, 127
  %v119 = shl i32 %v118, 23
  %v120 = bitcast i32 %v119 to float
  %v121 = fmul float %v116, %v120
  %v122 = fsub float 0x3FF0000000000000, %v121
  %v123 = call float @llvm.copysign.f32(float %v122, float %v82)
  %v124 = fcmp olt float %v83, 0x3FF0000000000000
  %v125 = select i1 %v124, float %v91, float %v123
  %v126 = fmul float 0x3FE0000000000000, %v81
  %v127 = fadd float 0x3FF0000000000000, %v125
  %v128 = fmul float %v126, %v127
  %v129 = fsub float %v128, %c11
  %v130 = fcmp ogt float %v129, 0x40562E4300000000
  %v131 = select i1 %v130, float 0x40562E4300000000, float %v129
  %v132 = fcmp olt float %v131, 0xC059FE3680000000
  %v133 = select i1 %v132, float 0xC059FE3680000000, float %v131
  %v134 = fmul float %v133, 0x3FF7154760000000
  %v135 = call float @llvm.rint.f32(float %v134)
  %v136 = call float @llvm.fmuladd.f32(float %v135, float 0xBFE6300000000000, float %v133)
  %v137 = call float @llvm.fmuladd.f32(float %v135, float 0x3F2BD01060000000, float %v136)
  %v138 = call float @llvm.fmuladd.f32(float 0x3F29FCAAE0000000, float %v137, float 0x3F56D96380000000)
  %v139 = call float @llvm.fmuladd.f32(float %v138, float %v137, float 0x3F81111E00000000)
  %v140 = call float @llvm.fmuladd.f32(float %v139, float %v137, float 0x3FA5554800000000)
  %v141 = call float @llvm.fmuladd.f32(float %v140, float %v137, float 0x3FC5555540000000)
  %v142 = call float @llvm.fmuladd.f32(float %v141, float %v137, float 0x3FE0000000000000)
  %v143 = fmul float %v137, %v137
  %v144 = call float @llvm.fmuladd.f32(float %v143, float %v142, float %v137)
  %v145 = fadd float %v144, 0x3FF0000000000000
  %v146 = fptosi float %v135 to i32
  %v147 = ashr i32 %v146, 1
  %v148 = sub i32 %v146, %v147
  %v149 = add i32 %v147, 127
  %v150 = shl i32 %v149, 23
  %v151 = bitcast i32 %v150 to float
  %v152 = fmul float %v145, %v151
  %v153 = add i32 %v148, 127
  %v154 = shl i32 %v153, 23
  %v155 = bitcast i32 %v154 to float
  %v156 = fmul float %v152, %v155
  %v157 = fcmp ogt float %v129, 0x40562E4300000000
  %v158 = select i1 %v157, float 0x7FF0000000000000, float %v156
  %v159 = fcmp olt float %v129, 0xC059FE3680000000
  %v160 = select i1 %v159, float 0x0000000000000000, float %v158
  %v161 = getelementptr inbounds float, ptr %buf6, i64 %i72
  store float %v160, ptr %v161, align 4
  %v162 = fadd float %c73, %v160
  %v163 = add nsw i64 %i72, 1
  br label %loop69
exit71:
  br label %loop164
loop164:
  %i167 = phi i64 [ 0, %exit71 ], [ %v188, %body165 ]
  %v168 = icmp slt i64 %i167, 7
  br i1 %v168, label %body165, label %exit166
body165:
  %v169 = getelementptr inbounds float, ptr %buf6, i64 %i167
  %v170 = load float, ptr %v169, align 4
  %v171 = fdiv float 0x3FF0000000000000, %c73
  %v172 = fmul float %v170, %v171
  %v173 = bitcast float %v172 to i32
  %v174 = lshr i32 %v173, 16
  %v175 = and i32 %v174, 1
  %v176 = add i32 %v173, 32767
  %v177 = add i32 %v176, %v175
  %v178 = and i32 %v177, -65536
  %v179 = bitcast i32 %v178 to float
  %v180 = fcmp uno float %v172, %v172
  %v181 = select i1 %v180, float 0x7FF8000000000000, float %v179
  %v182 = mul i64 %i4, 7
  %v183 = add i64 %v182, %i167
  %v184 = bitcast float %v181 to i32
  %v185 = lshr i32 %v184, 16
  %v186 = trunc i32 %v185 to i16
  %v187 = getelementptr inbounds i16, ptr %a1, i64 %v183
  store i16 %v186, ptr %v187, align 2
  %v188 = add nsw i64 %i167, 1
  br label %loop164, !llvm.loop !0
exit166:
  %v189 = add nsw i64 %i4, 1
  br label %loop1
exit3:
  ret void
}

declare float @llvm.copysign.f32(float, float)
declare float @llvm.fabs.f32(float)
declare float @llvm.fmuladd.f32(float, float, float)
declare float @llvm.maxnum.f32(float, float)
declare float @llvm.rint.f32(float)
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)

attributes #0 = { nounwind }
!0 = distinct !{!0, !1}
!1 = !{!"llvm.loop.vectorize.enable", i1 true}
